import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../helpers/test-database.js';
import { cli, startServer, waitFor, type ServerProcess } from '../helpers/leoflow-process.js';
import { runEnds } from '../helpers/run-ends.js';
import { FAST_FAULT_FLAGS } from '../helpers/fault-flags.js';

/**
 * A task that runs far longer than the heartbeat threshold, while its holder keeps heartbeating,
 * is never reaped: the threshold bounds the silence, not the run time.
 */

let db: TestDatabase;
let tmp: string;
let server: ServerProcess | undefined;

beforeAll(async () => {
  db = await createTestDatabase();
  tmp = await mkdtemp(path.join(os.tmpdir(), 'leoflow-fault-long-'));
});

afterAll(async () => {
  await server?.kill();
  await db?.drop();
  if (tmp) await rm(tmp, { recursive: true, force: true });
});

function metricValue(text: string, series: string): number | null {
  for (const line of text.split('\n')) if (line.startsWith(`${series} `)) return Number(line.slice(series.length + 1));
  return null;
}

describe('a task running 5x the heartbeat threshold', () => {
  it('keeps heartbeating, is never reaped and succeeds on try 1', async () => {
    server = await startServer({
      env: { DATABASE_URL: db.url },
      args: [...FAST_FAULT_FLAGS],
    });
    const ran = path.join(tmp, 'ran');
    const file = path.join(tmp, 'long.yaml');
    await writeFile(
      file,
      [
        'dag_id: long',
        'tasks:',
        '  - id: slow',
        `    command: ["sh", "-c", "echo $LEOFLOW_TASK_ID $LEOFLOW_TRY_NUMBER >> ${ran}; sleep 5"]`,
        '    retries: 2',
        '    retry_delay: 200ms',
        '',
      ].join('\n'),
    );
    expect((await cli(server.url, ['dag', 'apply', file])).code).toBe(0);
    const t = await cli(server.url, ['run', 'trigger', 'long', '-o', 'json']);
    expect(t.code, t.stderr).toBe(0);
    const runId = JSON.parse(t.stdout).run_id as string;

    const heartbeat = async () => {
      const [row] = await db.sql<{ state: string; heartbeat_at: Date | null; started_at: Date | null }[]>`
        select state, heartbeat_at, started_at from task_instances where run_id = ${runId} and task_id = 'slow'`;
      return row;
    };
    await waitFor('slow running', async () => (await heartbeat())?.state === 'running');
    // Sampled well past the threshold, each time while the task still runs.
    await new Promise((r) => setTimeout(r, 1500));
    const first = await heartbeat();
    await new Promise((r) => setTimeout(r, 1500));
    const second = await heartbeat();
    expect(first!.state).toBe('running');
    expect(second!.state).toBe('running');
    expect(second!.heartbeat_at!.getTime()).toBeGreaterThan(first!.heartbeat_at!.getTime());
    expect(first!.heartbeat_at!.getTime()).toBeGreaterThan(first!.started_at!.getTime());
    // Fresh: the flush interval (200 ms) plus scheduling slack, far under the 1 s threshold.
    const [fresh] = await db.sql<{ age: number }[]>`
      select extract(epoch from now() - heartbeat_at)::float8 as age from task_instances where run_id = ${runId} and task_id = 'slow'`;
    expect(fresh!.age).toBeLessThan(1);

    const state = await runEnds(db.sql, runId);
    expect(state).toBe('success');
    const [ti] = await db.sql<
      { state: string; try_number: number; exit_code: number; error: string | null; ran_ms: number }[]
    >`
      select state, try_number, exit_code, error, extract(epoch from ended_at - started_at)::float8 * 1000 as ran_ms
      from task_instances where run_id = ${runId}`;
    expect(ti).toMatchObject({ state: 'success', try_number: 1, exit_code: 0, error: null });
    expect(ti!.ran_ms).toBeGreaterThan(4900);
    const lost = await db.sql`select 1 from events where run_id = ${runId} and payload->>'reason' = 'agent_lost'`;
    expect(lost.length).toBe(0);
    expect((await readFile(ran, 'utf8')).trim()).toBe('slow 1');

    const res = await fetch(server.metricsUrl);
    const metrics = await res.text();
    expect(metricValue(metrics, 'leoflow_agent_lost_tasks_total')).toBe(0);
    expect(metricValue(metrics, 'leoflow_orphan_reaped_total{kind="ti"}') ?? 0).toBe(0);
    expect((await server.stop()).code).toBe(0);
  });
});
