import { describe, expect, it } from 'vitest';
import { applyDagFile } from '../helpers/dag-file.js';
import { leaderAndStandby } from '../helpers/leader-and-standby.js';
import { cli, waitFor } from '../helpers/leoflow-process.js';
import { replicasForFile } from '../helpers/server-fixture.js';

/**
 * Two replicas on one database; the leader is SIGKILLed as a 10,000-item map expands (right as its
 * upstream succeeds). The expansion is one statement: the new leader finds it whole or not begun,
 * and the mapped task ends up with exactly one instance per item, no item lost or doubled.
 */
const N = 10_000;
const FLAGS = ['--leader-watchdog', '1000ms', '--tick-interval', '200ms', '--max-output-size', '1MiB'];

describe('leader killed while a map expands', () => {
  const f = replicasForFile({ tmpPrefix: 'leoflow-map-kill-' });
  const start = f.launcher(FLAGS);

  it('loses and doubles no item', async () => {
    const gen = `seq 0 ${N - 1} | paste -sd, - | sed 's/^/{"items":[/; s/$/]}/' > "$LEOFLOW_OUTPUT"`;
    const { a, b, apiB } = await leaderAndStandby(start);
    await applyDagFile(b.url, f.tmp, {
      dagId: 'fan',
      tasks: [
        '  - id: gen',
        `    command: ${JSON.stringify(gen)}`,
        '  - id: each',
        '    command: ["true"]',
        '    depends_on: [gen]',
        '    map: { over: gen.items, max_parallel: 1 }',
      ],
    });
    const runId = (await apiB.workflow.triggerRun({ dagId: 'fan' })).run!.runId;
    // The moment gen's success is written, the leader's next step expands: kill it then.
    await waitFor(
      'gen succeeded',
      async () => {
        const [r] = await f.db.sql<{ state: string }[]>`
          select state from task_instances where run_id = ${runId} and task_id = 'gen'`;
        return r?.state === 'success';
      },
      30_000,
      5,
    );
    await a.kill();
    const [atKill] = await f.db.sql<{ n: number }[]>`
      select count(*)::int as n from task_instances where run_id = ${runId} and map_parent is not null`;
    // All or nothing, whatever moment the kill hit.
    console.log(`mapped instances at the kill: ${atKill!.n}`);
    expect([0, N]).toContain(atKill!.n);
    await waitFor('b leads', async () => (await apiB.cluster.getLeader({})).leaderId === 'replica-b', 10_000, 20);
    await waitFor(
      'expanded',
      async () => {
        const [r] = await f.db.sql<{ map_count: number | null }[]>`
          select map_count from task_instances where run_id = ${runId} and task_id = 'each'`;
        return r?.map_count ?? null;
      },
      60_000,
      50,
    );
    const [c] = await f.db.sql<{ n: number; distinct_i: number; lo: number; hi: number; events: number }[]>`
      select count(*)::int as n, count(distinct map_index)::int as distinct_i, min(map_index) as lo,
             max(map_index) as hi,
             (select count(*)::int from events where run_id = ${runId} and kind = 'ti.expanded') as events
      from task_instances where run_id = ${runId} and map_parent is not null`;
    expect(c).toEqual({ n: N, distinct_i: N, lo: 0, hi: N - 1, events: 1 });
    // And the new leader dispatches them.
    await waitFor(
      'a mapped instance ran',
      async () => {
        const [r] = await f.db.sql<{ n: number }[]>`
          select count(*)::int as n from task_instances
          where run_id = ${runId} and map_parent is not null and state = 'success'`;
        return r!.n >= 3 ? true : null;
      },
      60_000,
      100,
    );
    expect((await cli(b.url, ['run', 'cancel', runId])).code).toBe(0);
  }, 180_000);
});
