import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { applyDagFile } from '../helpers/dag-file.js';
import { EDITIONS } from '../helpers/editions.js';
import { leaderAndStandby } from '../helpers/leader-and-standby.js';
import { waitFor } from '../helpers/leoflow-process.js';
import { runsEnd } from '../helpers/runs-end.js';
import { replicasForFile } from '../helpers/server-fixture.js';

/**
 * Two replicas on one database; the leader is SIGKILLed mid-run. The standby must lead within one
 * watchdog period plus one tick, and every run must still complete: attempts the dead leader held
 * are declared lost after the heartbeat threshold and retried by the new leader. Against both
 * editions: Pro's 16 drainers put more attempts in flight when the leader dies than Lite's one.
 */

const WATCHDOG_MS = 1000;
const TICK_MS = 200;
const FLAGS = [
  ...['--leader-watchdog', `${WATCHDOG_MS}ms`, '--tick-interval', `${TICK_MS}ms`],
  ...['--heartbeat-interval', '200ms', '--heartbeat-threshold', '1s'],
];

describe.each(EDITIONS)('leader failover ($edition)', ({ edition, flags }) => {
  const f = replicasForFile({ tmpPrefix: 'leoflow-failover-' });
  const start = f.launcher([...flags, ...FLAGS]);

  it('the standby leads within watchdog + tick after the leader is killed, and every run completes', async () => {
    const ran = path.join(f.tmp, 'ran.log');
    const tasks = Array.from({ length: 6 }, (_, i) => [
      `  - id: t${i}`,
      `    command: ["sh", "-c", "echo $LEOFLOW_RUN_ID $LEOFLOW_TASK_ID $LEOFLOW_TRY_NUMBER >> ${ran}; sleep 0.3"]`,
      `    retries: 2`,
      `    retry_delay: 100ms`,
      ...(i > 0 ? [`    depends_on: [t${i - 1}]`] : []),
    ]);

    const { a, b, apiB } = await leaderAndStandby(start);
    expect(await apiB.cluster.getLeader({})).toMatchObject({ leaderId: 'replica-a', edition });

    await applyDagFile(b.url, f.tmp, { dagId: 'work', tasks: tasks.flat() });
    const runIds: string[] = [];
    for (let i = 0; i < 3; i++) runIds.push((await apiB.workflow.triggerRun({ dagId: 'work' })).run!.runId);
    // Let the leader get some work in flight, then kill it.
    await waitFor('work in flight', async () => {
      const [r] = await f.db.sql<
        { n: number }[]
      >`select count(*)::int as n from task_instances where state = 'success'`;
      return r!.n >= 2;
    });
    await a.kill();
    const killedAt = Date.now();
    await waitFor('b leads', async () => (await apiB.cluster.getLeader({})).leaderId === 'replica-b', 10_000, 20);
    const takeoverMs = Date.now() - killedAt;
    expect(takeoverMs).toBeLessThan(WATCHDOG_MS + TICK_MS + 500);

    expect(await runsEnd(f.db.sql, runIds, 40_000)).toEqual(['success', 'success', 'success']);

    // One claim per attempt (an attempt the dead leader claimed but never started is one too),
    // and a retry only where the attempt was declared lost.
    const tis = await f.db.sql<{ id: string; task_id: string; try_number: number }[]>`
      select id, task_id, try_number from task_instances where run_id = any(${runIds}::bigint[])`;
    for (const ti of tis) {
      const claims = await f.db.sql<{ n: number }[]>`
        select count(*)::int as n from events where ti_id = ${ti.id} and payload->>'to' = 'queued'`;
      expect(claims[0]!.n, `TI ${ti.id}`).toBe(ti.try_number);
      if (ti.try_number > 1) {
        const lost = await f.db.sql`select 1 from events where ti_id = ${ti.id} and payload->>'reason' = 'agent_lost'`;
        expect(lost.length, `TI ${ti.id} was retried without being declared lost`).toBe(ti.try_number - 1);
      }
    }
    // No attempt ran twice: each (run, task, try) appears at most once in what the tasks wrote.
    const lines = (await readFile(ran, 'utf8')).trim().split('\n');
    expect(new Set(lines).size).toBe(lines.length);
  });
});
