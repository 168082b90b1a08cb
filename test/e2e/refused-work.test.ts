import { describe, expect, it } from 'vitest';
import { createClients } from '../../src/cli/client.js';
import { waitFor } from '../helpers/leoflow-process.js';
import { serverForFile } from '../helpers/server-fixture.js';
import { applyDag } from '../helpers/applied-dag.js';

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

const f = serverForFile({ tmpPrefix: 'leoflow-refused-' });

describe('work a full dispatch queue refused', () => {
  it(`is offered again as the queue drains: ${RUNS} runs on Lite's queue of one, within ${BOUND_MS / 1000} s`, async () => {
    await applyDag(
      f.server.url,
      f.tmp,
      `dag_id: backlog\nmax_active_runs: 1000\ntasks:\n  - id: t\n    command: ["true"]\n`,
    );
    const api = createClients(f.server.url);
    await f.api.workflow.pauseDag({ dagId: 'backlog', paused: true });
    for (let i = 0; i < RUNS; i++) await f.api.workflow.triggerRun({ dagId: 'backlog' });
    const t0 = performance.now();
    await f.api.workflow.pauseDag({ dagId: 'backlog', paused: false });
    await waitFor(
      `${RUNS} runs ended`,
      async () =>
        (
          await f.db.sql<
            { n: number }[]
          >`select count(*)::int as n from dag_runs where dag_id = 'backlog' and state = 'success'`
        )[0]!.n === RUNS,
      BOUND_MS,
      100,
    );
    const ms = performance.now() - t0;
    console.log(`${RUNS} runs through a queue of one in ${Math.round(ms)} ms`);
    const [waited] = await f.db.sql<
      { n: number }[]
    >`select count(*)::int as n from task_instances t join dag_runs r on r.id = t.run_id where r.dag_id = 'backlog' and t.state <> 'success'`;
    expect(waited!.n).toBe(0);
  });
});
