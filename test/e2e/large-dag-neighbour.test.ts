import { mkdir, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createClients, type Clients } from '../../src/cli/client.js';
import { RunState } from '../../src/gen/leoflow/v1/types_pb.js';
import { startServer, type ServerProcess } from '../helpers/leoflow-process.js';
import { createTestDatabase, type TestDatabase } from '../helpers/test-database.js';

/**
 * Issue 38: a DAG at the documented limit of 10,000 tasks (docs/dag-reference.md), waiting on its
 * first task, must not starve another DAG's runs. Another DAG's trigger → success is timed idle,
 * then while the large run waits; the median stays within 2x (100 ms floor, for a loaded CI box).
 */

const TASKS = 10_000;
const RUNS = 5;
let db: TestDatabase;
let s: ServerProcess;

beforeAll(async () => {
  db = await createTestDatabase();
  const dags = path.join(os.tmpdir(), `leoflow-large-dag-${process.pid}`);
  await mkdir(dags, { recursive: true });
  const waiting = Array.from({ length: TASKS - 1 }, (_, i) => `  - {id: t${i}, command: ["true"], depends_on: [gate]}`);
  await writeFile(
    path.join(dags, 'large.yaml'),
    ['dag_id: large', 'tasks:', '  - {id: gate, command: ["sleep", "120"]}', ...waiting, ''].join('\n'),
  );
  await writeFile(path.join(dags, 'other.yaml'), 'dag_id: other\ntasks:\n  - {id: a, command: ["true"]}\n');
  s = await startServer({ env: { DATABASE_URL: db.url }, args: ['--dags', dags], readyTimeoutMs: 60_000 });
}, 90_000);
afterAll(async () => {
  await s?.kill();
  await db?.drop();
});

async function timeRun(c: Clients): Promise<number> {
  const t = performance.now();
  const runId = (await c.workflow.triggerRun({ dagId: 'other' })).run!.runId;
  for (;;) {
    const r = (await c.workflow.getRun({ runId })).run!;
    if (r.state === RunState.SUCCESS) return performance.now() - t;
    if (r.state !== RunState.QUEUED && r.state !== RunState.RUNNING)
      throw new Error(`run ${runId}: ${RunState[r.state]}`);
    await new Promise((res) => setTimeout(res, 10));
  }
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

describe('a 10,000-task DAG that waits', () => {
  it("leaves another DAG's runs within 2x of their idle time", async () => {
    const api = createClients(s.url);
    await timeRun(api); // warm-up
    const idle: number[] = [];
    for (let i = 0; i < RUNS; i++) idle.push(await timeRun(api));
    const large = (await api.workflow.triggerRun({ dagId: 'large' })).run!.runId;
    // Waiting: its gate runs, its 9,999 others wait on it.
    for (;;) {
      const r = (await api.workflow.getRun({ runId: large })).run!;
      if (r.state === RunState.RUNNING) break;
      await new Promise((res) => setTimeout(res, 50));
    }
    const waiting: number[] = [];
    for (let i = 0; i < RUNS; i++) waiting.push(await timeRun(api));
    console.log(
      `large-dag: idle ${idle.map(Math.round).join(' ')} ms, beside it ${waiting.map(Math.round).join(' ')} ms`,
    );
    expect(median(waiting)).toBeLessThanOrEqual(2 * Math.max(median(idle), 100));
  }, 120_000);
});
