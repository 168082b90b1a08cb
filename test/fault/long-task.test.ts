import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { applyDagFile, triggerByCli } from '../helpers/dag-file.js';
import { waitFor } from '../helpers/leoflow-process.js';
import { runEnds } from '../helpers/run-ends.js';
import { FAST_FAULT_FLAGS } from '../helpers/fault-flags.js';
import { scrapeMetrics } from '../helpers/scrape-metrics.js';
import { serverForFile } from '../helpers/server-fixture.js';

/**
 * A task that runs far longer than the heartbeat threshold, while its holder keeps heartbeating,
 * is never reaped: the threshold bounds the silence, not the run time.
 */

const f = serverForFile({ args: [...FAST_FAULT_FLAGS], tmpPrefix: 'leoflow-fault-long-' });

describe('a task running 5x the heartbeat threshold', () => {
  it('keeps heartbeating, is never reaped and succeeds on try 1', async () => {
    const { db, server } = f;
    const ran = path.join(f.tmp, 'ran');
    await applyDagFile(server.url, f.tmp, {
      dagId: 'long',
      tasks: [
        '  - id: slow',
        `    command: ["sh", "-c", "echo $LEOFLOW_TASK_ID $LEOFLOW_TRY_NUMBER >> ${ran}; sleep 5"]`,
        '    retries: 2',
        '    retry_delay: 200ms',
      ],
    });
    const runId = await triggerByCli(server.url, 'long');

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

    const metrics = await scrapeMetrics(server.metricsUrl);
    expect(metrics.get('leoflow_agent_lost_tasks_total')).toBe(0);
    expect(metrics.get('leoflow_orphan_reaped_total{kind="ti"}') ?? 0).toBe(0);
    expect((await server.stop()).code).toBe(0);
  });
});
