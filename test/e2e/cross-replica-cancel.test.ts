import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { createClients, type Clients } from '../../src/cli/client.js';
import { RunState } from '../../src/gen/leoflow/v1/types_pb.js';
import { waitFor, type ServerProcess } from '../helpers/leoflow-process.js';
import { replicasForFile } from '../helpers/server-fixture.js';
import { processGone } from '../helpers/process-gone.js';
import { applyDag } from '../helpers/applied-dag.js';

/**
 * A cancel served by the replica that does not lead, for a subprocess task running on the leader:
 * it reaches the task over NOTIFY in milliseconds, as it does an agent's, instead of at the
 * leader's next heartbeat of the task (an interval later). Each cancel is sent right after such a
 * heartbeat, so waiting for the next one would take the whole interval.
 */

const HEARTBEAT_MS = 5_000;
/** Well under the heartbeat interval: only a notification can be this quick. */
const CANCEL_WITHIN_MS = 1_000;

const f = replicasForFile({ tmpPrefix: 'leoflow-xcancel-' });

const start = f.launcher(['--heartbeat-interval', `${HEARTBEAT_MS / 1000}s`]);

/** The task's process on the leader, once the leader has heartbeated it (heartbeat_at moved past started_at). */
async function heartbeatedProcess(runId: string): Promise<{ tiId: string; pid: number }> {
  return waitFor(
    `a heartbeat of run ${runId}'s task`,
    async () => {
      const [t] = await f.db.sql<{ id: string; pid: number | null; beat: boolean }[]>`
      select id, pid, heartbeat_at > started_at as beat from task_instances where run_id = ${runId} and state = 'running'`;
      return t?.beat && t.pid !== null ? { tiId: t.id, pid: t.pid } : null;
    },
    HEARTBEAT_MS * 3,
    10,
  );
}

/** Milliseconds from now until the process is gone (at most `limitMs`, then it fails). */
async function msUntilGone(pid: number, since: number, limitMs: number): Promise<number> {
  await waitFor(`pid ${pid} gone`, async () => processGone(pid), limitMs, 5);
  return Date.now() - since;
}

describe('a cancel served by the replica that does not lead', () => {
  let leader: ServerProcess;
  let standby: Clients;

  beforeAll(async () => {
    leader = await start(['--replica-id', 'lead']);
    const apiLead = createClients(leader.url);
    await waitFor('lead leads', async () => (await apiLead.cluster.getLeader({})).leaderId === 'lead');
    const b = await start(['--replica-id', 'standby']);
    standby = createClients(b.url);
    expect((await standby.cluster.getLeader({})).leaderId).toBe('lead');
    // On SIGTERM the task leaves a marker: it was stopped, not merely left to die with the group.
    await applyDag(b.url, f.tmp, [
      'dag_id: long',
      'tasks:',
      '  - id: work',
      `    command: ["sh", "-c", "trap 'echo $LEOFLOW_RUN_ID > ${f.tmp}/term-$LEOFLOW_RUN_ID; exit 143' TERM; while :; do sleep 0.05; done"]`,
    ]);
  });

  it(
    'CancelRun stops the task on the leader within a second, not at its next heartbeat',
    { timeout: 60_000 },
    async () => {
      const runId = (await standby.workflow.triggerRun({ dagId: 'long' })).run!.runId;
      const { tiId, pid } = await heartbeatedProcess(runId);
      expect(processGone(pid)).toBe(false);

      const sent = Date.now();
      const cancelled = await standby.workflow.cancelRun({ runId });
      expect(cancelled.run!.state).toBe(RunState.CANCELLED);
      const ms = await msUntilGone(pid, sent, HEARTBEAT_MS * 2);
      expect(ms, `the task's process lived ${ms} ms after the cancel`).toBeLessThan(CANCEL_WITHIN_MS);
      expect((await readFile(path.join(f.tmp, `term-${runId}`), 'utf8')).trim()).toBe(runId);

      const [ti] = await f.db.sql<
        { state: string; error: string | null }[]
      >`select state, error from task_instances where id = ${tiId}`;
      expect(ti).toMatchObject({ state: 'cancelled', error: 'run cancelled' });
      await waitFor(
        'the cancel in the task log',
        async () => {
          const lines = await f.db.sql<
            { line: string }[]
          >`select line from task_logs where ti_id = ${tiId} and stream = 'system'`;
          return lines.some((l) => l.line.startsWith(`cancelled: run ${runId} cancelled: sending SIGTERM`));
        },
        5_000,
      );
    },
  );

  it('CancelTaskInstance stops the task on the leader within a second too', { timeout: 60_000 }, async () => {
    const runId = (await standby.workflow.triggerRun({ dagId: 'long' })).run!.runId;
    const { tiId, pid } = await heartbeatedProcess(runId);

    const sent = Date.now();
    await standby.workflow.cancelTaskInstance({ runId, taskId: 'work' });
    const ms = await msUntilGone(pid, sent, HEARTBEAT_MS * 2);
    expect(ms, `the task's process lived ${ms} ms after the cancel`).toBeLessThan(CANCEL_WITHIN_MS);
    expect((await readFile(path.join(f.tmp, `term-${runId}`), 'utf8')).trim()).toBe(runId);
    const [ti] = await f.db.sql<{ state: string }[]>`select state from task_instances where id = ${tiId}`;
    expect(ti!.state).toBe('cancelled');
  });
});
