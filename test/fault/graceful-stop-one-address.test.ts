import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { createClients } from '../../src/cli/client.js';
import { cli, startAgent, waitFor } from '../helpers/leoflow-process.js';
import { expectEveryTaskRanOnce } from '../helpers/every-task-ran-once.js';
import { runsEnd } from '../helpers/runs-end.js';
import { replicasForFile } from '../helpers/server-fixture.js';
import { gracefulStopFlags } from '../helpers/fault-flags.js';
import { writeLedgerGridDag } from '../helpers/ledger-grid-dag.js';

/**
 * Issue 34: a graceful stop must lose nothing even when the agents were given one address only,
 * that of the replica that stops. Five cycles: the leader is stopped with work in flight on its
 * agents; a new replica (on an address no agent was given) is started before each stop, so the
 * agents can reach the next home only through what the control plane told them. Every task runs
 * once, as try 1, and no attempt is declared lost.
 */

const THRESHOLD_MS = 8000;
const FLAGS = gracefulStopFlags(THRESHOLD_MS);
const CYCLES = 5;
const WIDTH = 4;
const DEPTH = 2;

const f = replicasForFile({ tmpPrefix: 'leoflow-graceful-one-' });
const { servers, agents } = f;

const start = f.launcher(FLAGS);

describe('graceful stop of the leader, agents given one address', () => {
  it(`loses nothing across ${CYCLES} cycles: every task runs once as try 1, none is declared lost`, async () => {
    const ledger = path.join(f.tmp, 'ledger.log');
    const file = path.join(f.tmp, 'wide.yaml');
    await writeLedgerGridDag(file, ledger, { width: WIDTH, depth: DEPTH, sleepTenths: (d, w) => 3 + ((d + w) % 3) });

    let leader = await start(['--replica-id', 'replica-0']);
    await waitFor(
      'replica-0 leads',
      async () => (await createClients(leader.url).cluster.getLeader({})).leaderId === 'replica-0',
    );
    // The agents know the first leader's address, and only it.
    for (const id of ['a1', 'a2']) agents.push(startAgent(leader.url, ['--id', id, '--slots', '4']));
    await waitFor(
      'agents connected',
      async () => {
        const [r] = await f.db.sql<
          { n: number }[]
        >`select count(*)::int as n from agents where connected_replica = 'replica-0'`;
        return r!.n === 2;
      },
      40_000,
    );
    expect((await cli(leader.url, ['dag', 'apply', file])).code).toBe(0);

    const runIds: string[] = [];
    for (let cycle = 1; cycle <= CYCLES; cycle++) {
      // The next home, on an address the agents were never given.
      const next = await start(['--replica-id', `replica-${cycle}`]);
      const api = createClients(leader.url);
      const mine: string[] = [];
      for (let i = 0; i < 2; i++) mine.push((await api.workflow.triggerRun({ dagId: 'wide' })).run!.runId);
      runIds.push(...mine);
      const leaderId = (await api.cluster.getLeader({})).leaderId;
      await waitFor(
        `cycle ${cycle}: work in flight on ${leaderId}'s agents`,
        async () => {
          const [r] = await f.db.sql<{ busy: number }[]>`
          select count(*) filter (where t.state = 'running' and a.connected_replica = ${leaderId})::int as busy
          from task_instances t join agents a on a.agent_id = t.agent_id where t.run_id = any(${mine}::bigint[])`;
          return r!.busy >= 2;
        },
        30_000,
        10,
      );
      expect(await leader.stop(25_000)).toEqual({ code: 0, signal: null });
      const nextApi = createClients(next.url);
      await waitFor(
        `cycle ${cycle}: replica-${cycle} leads`,
        async () => (await nextApi.cluster.getLeader({})).leaderId === `replica-${cycle}`,
        20_000,
      );
      await runsEnd(f.db.sql, mine, 60_000, `cycle ${cycle}: its runs ended`);
      await waitFor(
        `cycle ${cycle}: agents on replica-${cycle}`,
        async () => {
          const [r] = await f.db.sql<
            { n: number }[]
          >`select count(*)::int as n from agents where connected_replica = ${`replica-${cycle}`}`;
          return r!.n === 2;
        },
        20_000,
      );
      leader = next;
    }

    await expectEveryTaskRanOnce(f.db.sql, runIds, ledger, runIds.length * WIDTH * DEPTH);
    // The agents never exited: they followed the control plane from home to home.
    for (const a of agents) expect(a.child.exitCode).toBeNull();
  }, 300_000);
});
