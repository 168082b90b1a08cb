import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createClients } from '../../src/cli/client.js';
import { createTestDatabase, type TestDatabase } from '../helpers/test-database.js';
import { cli, startServer, waitFor, type ServerProcess } from '../helpers/leoflow-process.js';

/**
 * A backlog larger than the dispatch queue drains as the queue drains, not a stretch per tick:
 * the Lite server with its defaults (1 drainer, a queue of 1, a 1 s tick) and 40 one-task runs
 * started at once. The full queue refuses all but one; each drain offers the next ones. Before,
 * only the first drain did, and the rest waited for the tick (two tasks a second here).
 */

const RUNS = 40;
/** The tick paces a backlog left to it at ~2 runs a second, so 40 runs take ≥ 19 s that way;
 *  drained by events they take 40 `true` tasks' time, 1–3 s on a loaded machine. */
const BOUND_MS = 12_000;

let db: TestDatabase;
let server: ServerProcess;
let tmp: string;

beforeAll(async () => {
  db = await createTestDatabase();
  tmp = await mkdtemp(path.join(os.tmpdir(), 'leoflow-refused-'));
  server = await startServer({ env: { DATABASE_URL: db.url } });
});

afterAll(async () => {
  await server?.stop();
  await db?.drop();
  await rm(tmp, { recursive: true, force: true });
});

describe('work a full dispatch queue refused', () => {
  it(`is offered again as the queue drains: ${RUNS} runs on Lite's queue of one, within ${BOUND_MS / 1000} s`, async () => {
    const file = path.join(tmp, 'backlog.yaml');
    await writeFile(file, `dag_id: backlog\nmax_active_runs: 1000\ntasks:\n  - id: t\n    command: ["true"]\n`);
    expect((await cli(server.url, ['dag', 'apply', file])).code).toBe(0);
    const api = createClients(server.url);
    await api.workflow.pauseDag({ dagId: 'backlog', paused: true });
    for (let i = 0; i < RUNS; i++) await api.workflow.triggerRun({ dagId: 'backlog' });
    const t0 = performance.now();
    await api.workflow.pauseDag({ dagId: 'backlog', paused: false });
    await waitFor(
      `${RUNS} runs ended`,
      async () =>
        (
          await db.sql<
            { n: number }[]
          >`select count(*)::int as n from dag_runs where dag_id = 'backlog' and state = 'success'`
        )[0]!.n === RUNS,
      BOUND_MS,
      100,
    );
    const ms = performance.now() - t0;
    console.log(`${RUNS} runs through a queue of one in ${Math.round(ms)} ms`);
    const [waited] = await db.sql<
      { n: number }[]
    >`select count(*)::int as n from task_instances t join dag_runs r on r.id = t.run_id where r.dag_id = 'backlog' and t.state <> 'success'`;
    expect(waited!.n).toBe(0);
  });
});
