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
 * A graceful stop (SIGTERM) of the leader while agents connected to it run many short tasks.
 * Nothing may be lost: the stopping replica stops placing on its agents, releases leadership,
 * tells its agents to reconnect elsewhere and only then closes its listeners. Every run succeeds
 * with every task run once, as try 1 (a lost attempt would be declared lost after the heartbeat
 * threshold and retried as try 2), and every agent of the leader reconnects to the other replica
 * at once (no backoff), well within the heartbeat threshold, after being told to.
 */

const THRESHOLD_MS = 8000;
const BOUND_MS = THRESHOLD_MS / 4;
const FLAGS = [...gracefulStopFlags(THRESHOLD_MS), '--dispatch-workers', '4', '--dispatch-queue', '64'];
const RUNS = 6;
const WIDTH = 6;
const DEPTH = 3;

const f = replicasForFile({ tmpPrefix: 'leoflow-graceful-stop-' });
const { servers, agents } = f;

const start = f.launcher(FLAGS);

/** The JSON log records a process printed. */
function records(out: string): Record<string, unknown>[] {
  return out.split('\n').flatMap((l) => {
    try {
      return [JSON.parse(l) as Record<string, unknown>];
    } catch {
      return [];
    }
  });
}

describe('graceful stop of the leader', () => {
  it('loses no agent work: every run succeeds, every task runs once as try 1, and agents move within the bound', async () => {
    const ledger = path.join(f.tmp, 'ledger.log');
    const file = path.join(f.tmp, 'wide.yaml');
    await writeLedgerGridDag(file, ledger, { width: WIDTH, depth: DEPTH, sleepTenths: (d, w) => 2 + ((d + w) % 3) });

    const leader = await start(['--replica-id', 'replica-l']);
    const api = createClients(leader.url);
    await waitFor('l leads', async () => (await api.cluster.getLeader({})).leaderId === 'replica-l');
    const standby = await start(['--replica-id', 'replica-s']);
    const apiS = createClients(standby.url);

    // Three agents on the leader, each knowing both replicas; one on the standby from the start.
    const onLeader = ['a1', 'a2', 'a3'];
    for (const id of onLeader)
      agents.push(startAgent(leader.url, ['--server', standby.url, '--id', id, '--slots', '4']));
    agents.push(startAgent(standby.url, ['--server', leader.url, '--id', 'b1', '--slots', '4']));
    // (Each goes to its first address; on a loaded machine a stream that looks deaf sends an agent
    // on to its next one, which the test allows: it needs work on the leader's agents at the stop.)
    await waitFor(
      'agents connected',
      async () => {
        const [r] = await f.db.sql<
          { n: number }[]
        >`select count(*)::int as n from agents where connected_replica is not null`;
        return r!.n === 4;
      },
      40_000,
    );

    expect((await cli(leader.url, ['dag', 'apply', file])).code).toBe(0);
    const runIds: string[] = [];
    for (let i = 0; i < RUNS; i++) runIds.push((await api.workflow.triggerRun({ dagId: 'wide' })).run!.runId);
    const total = RUNS * WIDTH * DEPTH;
    // Stop the leader with work in flight on its agents and more to place.
    await waitFor(
      "work in flight on the leader's agents",
      async () => {
        const [r] = await f.db.sql<{ done: number; busy: number }[]>`
        select count(*) filter (where t.state = 'success')::int as done,
               count(*) filter (where t.state in ('queued', 'running') and a.connected_replica = 'replica-l')::int as busy
        from task_instances t left join agents a on a.agent_id = t.agent_id`;
        return r!.done >= total / 5 && r!.busy >= 4;
      },
      30_000,
      10,
    );
    // (On a loaded machine an agent may have moved already, after a deaf stream.)
    const atStop = (
      await f.db.sql<
        { agent_id: string }[]
      >`select agent_id from agents where connected_replica = 'replica-l' order by agent_id`
    ).map((r) => r.agent_id);
    expect(atStop.length).toBeGreaterThan(0);
    const stoppedAt = Date.now();
    const exit = await leader.stop(20_000);
    const stopMs = Date.now() - stoppedAt;
    expect(exit).toEqual({ code: 0, signal: null });
    expect((await apiS.cluster.getLeader({})).leaderId).toBe('replica-s');

    await runsEnd(f.db.sql, runIds, 60_000);
    // No attempt lost: every run succeeded, nothing declared lost, no try 2 anywhere; each task
    // ran exactly once: one line per (run, task) in the ledger, each of try 1.
    const lines = await expectEveryTaskRanOnce(f.db.sql, runIds, ledger, total);
    expect(lines.every((l) => l.endsWith(' 1'))).toBe(true);

    // Every agent is on the standby now. Each one the leader held was told to reconnect, did so
    // at once (no backoff: its first try went to the standby), and was there well within the
    // heartbeat threshold; Welcome bounded its backoff to a quarter of the threshold.
    const rows = await f.db.sql<
      { agent_id: string; connected_replica: string | null }[]
    >`select agent_id, connected_replica from agents order by agent_id`;
    expect(rows.map((r) => [r.agent_id, r.connected_replica])).toEqual([
      ['a1', 'replica-s'],
      ['a2', 'replica-s'],
      ['a3', 'replica-s'],
      ['b1', 'replica-s'],
    ]);
    const moves: number[] = [];
    for (const id of atStop) {
      const told = leader.logs.find((r) => r.agentId === id && String(r.msg).startsWith('told agent'));
      expect(told, `${id} was told to reconnect`).toBeDefined();
      const log = records(agents[onLeader.indexOf(id)]!.output()).filter((r) => Number(r.time) >= Number(told!.time));
      const back = log.findIndex((r) => r.msg === 'connected');
      expect(back, `${id} connected again`).toBeGreaterThanOrEqual(0);
      expect(log[back]).toMatchObject({ replica: 'replica-s', maxBackoffMs: BOUND_MS });
      expect(log.slice(0, back).map((r) => r.msg)).toContain(
        'the control plane asked for a reconnect: reconnecting now',
      );
      expect(log.slice(0, back).map((r) => r.msg)).not.toContain('stream ended: reconnecting');
      moves.push(Number(log[back]!.time) - Number(told!.time));
    }
    expect(Math.max(...moves)).toBeLessThan(THRESHOLD_MS / 2);
    console.log(
      `graceful stop: leader stopped in ${stopMs} ms; agents ${atStop.join(', ')} moved in ${moves.join(', ')} ms (backoff bound ${BOUND_MS} ms, threshold ${THRESHOLD_MS} ms)`,
    );
  });
});
