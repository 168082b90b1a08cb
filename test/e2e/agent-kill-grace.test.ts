import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { applyDag } from '../helpers/applied-dag.js';
import { waitFor } from '../helpers/leoflow-process.js';
import { isAlive } from '../helpers/process-group.js';
import { runEnds } from '../helpers/run-ends.js';
import { agentsOfEachTest, serverForFile } from '../helpers/server-fixture.js';

/**
 * An agent whose own --kill-grace (60 s) is far longer than the control plane's (500 ms) runs a
 * task that ignores SIGTERM past its timeout. The control plane fails an attempt at its timeout
 * plus its own kill grace (and a margin), and then retries it: the agent must have killed the task
 * by then, with the kill grace of the Assign, or two tries of one task would run at once. Try 1
 * runs on agent A, which is then drained, so try 2 runs on agent B: the agent's own "one process
 * per task instance" cannot hide an overlap.
 */

const TIMEOUT_MS = 2000;
const SERVER_KILL_GRACE_MS = 500;

const f = serverForFile({
  tmpPrefix: 'leoflow-kill-grace-',
  args: [
    '--heartbeat-interval',
    '300ms',
    '--heartbeat-threshold',
    '3s',
    '--kill-grace',
    `${SERVER_KILL_GRACE_MS}ms`,
    '--tick-interval',
    '200ms',
  ],
});
// The tasks are killed first (try 1 ignores SIGTERM), so the agents have nothing left to wait for.
const agents = agentsOfEachTest(f);
const { taskPids } = agents;

const agent = (id: string) =>
  agents.connect(id, ['--labels', 'pool=grace', '--kill-grace', '60s', '--shutdown-grace', '1s']);

describe("an agent whose --kill-grace is longer than the control plane's", () => {
  it(
    "kills a timed-out task within the control plane's grace: try 2 never overlaps try 1",
    { timeout: 90_000 },
    async () => {
      const ledger = path.join(f.tmp, 'ledger');
      // Try 1 ignores SIGTERM (the ignore is inherited by its `sleep`) and ticks until killed;
      // try 2 ends at once.
      const script = [
        `echo "start $LEOFLOW_TRY_NUMBER $$" >> ${ledger}`,
        `if [ "$LEOFLOW_TRY_NUMBER" = 1 ]; then trap "" TERM; while :; do echo "tick 1" >> ${ledger}; sleep 0.05; done; fi`,
        `echo "end $LEOFLOW_TRY_NUMBER" >> ${ledger}`,
      ].join('; ');
      await applyDag(f.server.url, f.tmp, [
        'dag_id: grace',
        'tasks:',
        '  - id: work',
        '    executor: agents',
        '    placement: { labels: { pool: grace } }',
        `    command: ["sh", "-c", ${JSON.stringify(script)}]`,
        `    timeout: ${TIMEOUT_MS}ms`,
        '    retries: 1',
        '    retry_delay: 100ms',
      ]);

      await agent('grace-a');
      const runId = (await f.api.workflow.triggerRun({ dagId: 'grace' })).run!.runId;
      const lines = async () => (await readFile(ledger, 'utf8').catch(() => '')).split('\n').filter((l) => l !== '');
      const started = await waitFor(
        'try 1 started',
        async () => (await lines()).find((l) => l.startsWith('start 1 ')) ?? null,
      );
      const startedAt = Date.now();
      const pid1 = Number(started.split(' ')[2]);
      taskPids.add(pid1);
      // Try 2 must go elsewhere: A takes no new work (from before try 1 can end), B does.
      await f.api.cluster.drainAgent({ agentId: 'grace-a' });
      expect(Date.now() - startedAt, 'A drained before try 1 timed out').toBeLessThan(TIMEOUT_MS);
      await agent('grace-b');

      const ti = async () => {
        const [row] = await f.db.sql<{ state: string; try_number: number; agent_id: string | null }[]>`
        select state, try_number, agent_id from task_instances where run_id = ${runId}`;
        return row;
      };
      // The moment the control plane counts try 1 over, its process must be gone.
      await waitFor(
        'try 1 ended in the database',
        async () => {
          const row = await ti();
          return row !== undefined && (row.try_number > 1 || !['queued', 'running'].includes(row.state));
        },
        30_000,
        20,
      );
      expect(isAlive(pid1), `try 1 (pid ${pid1}) still alive when the control plane ended it`).toBe(false);

      expect(await runEnds(f.db.sql, runId, { timeoutMs: 30_000 })).toBe('success');
      expect(await ti()).toMatchObject({ state: 'success', try_number: 2, agent_id: 'grace-b' });
      const all = await lines();
      const start2 = all.findIndex((l) => l.startsWith('start 2 '));
      expect(start2, all.join('\n')).toBeGreaterThan(0);
      taskPids.add(Number(all[start2]!.split(' ')[2]));
      expect(
        all.slice(start2).filter((l) => l === 'tick 1'),
        'try 1 ticked after try 2 started',
      ).toEqual([]);
      expect(all).toContain('end 2');
      expect(all).not.toContain('end 1');

      // Try 1 was stopped with the control plane's grace, not the agent's.
      const system = await f.db.sql<{ line: string }[]>`
      select l.line from task_logs l join task_instances t on t.id = l.ti_id
      where t.run_id = ${runId} and l.try_number = 1 and l.stream = 'system' order by l.seq`;
      expect(system.map((r) => r.line)).toContain(
        `still running ${SERVER_KILL_GRACE_MS} ms after SIGTERM: sending SIGKILL`,
      );
      const [ended] = await f.db.sql<{ payload: Record<string, unknown> }[]>`
      select e.payload from events e join task_instances t on t.id = e.ti_id
      where t.run_id = ${runId} and e.kind = 'ti.state' and (e.payload->>'try')::int = 1 and e.payload->>'to' = 'up_for_retry'`;
      expect(ended!.payload.error).toBe(`timed out after ${TIMEOUT_MS} ms`);
    },
  );
});
