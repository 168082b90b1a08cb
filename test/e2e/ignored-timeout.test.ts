import { randomUUID } from 'node:crypto';

import { beforeAll, describe, expect, it } from 'vitest';
import { createClients } from '../../src/cli/client.js';
import { AttemptOutcome, ProtocolVersion, type ConnectResponse } from '../../src/gen/leoflow/v1/agent_pb.js';
import { RunState } from '../../src/gen/leoflow/v1/types_pb.js';
import { waitFor } from '../helpers/leoflow-process.js';
import { scriptedAgent } from '../helpers/scripted-agent.js';
import { serverForFile } from '../helpers/server-fixture.js';
import { applyDag } from '../helpers/applied-dag.js';

/**
 * The control plane does not only trust agents to enforce timeouts. A hand-written agent takes an
 * Assign with a timeout, never enforces it and keeps sending keepalives that list the attempt:
 * past the timeout plus the kill grace plus the time allowed for the holder's end to arrive (a
 * keepalive interval, at least 5 s) the leader ends the attempt as timed out, cancels it at the
 * agent, and the task's retry runs.
 */

const TIMEOUT_MS = 1000;
const KILL_GRACE_MS = 500;
const KEEPALIVE_MS = 300;
/** What the control plane allows for the holder's end to arrive: the keepalive interval, at least 5 s. */
const END_REPORT_MS = 5000;

const f = serverForFile({
  tmpPrefix: 'leoflow-timeout-',
  args: [
    '--heartbeat-interval',
    `${KEEPALIVE_MS}ms`,
    '--heartbeat-threshold',
    '2s',
    '--kill-grace',
    `${KILL_GRACE_MS}ms`,
    '--tick-interval',
    '200ms',
  ],
});

beforeAll(async () => {
  await applyDag(f.server.url, f.tmp, [
    'dag_id: slow',
    'tasks:',
    '  - id: work',
    '    executor: agents',
    '    command: [sleep, "3600"]',
    `    timeout: ${TIMEOUT_MS}ms`,
    '    retries: 1',
    '    retry_delay: 100ms',
  ]);
});

/** The next message of `case`, skipping others. */
async function nextOf<C extends NonNullable<ConnectResponse['msg']['case']>>(
  inbox: { next(ms?: number): Promise<ConnectResponse> },
  kind: C,
  timeoutMs: number,
) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const m = await inbox.next(Math.max(1, deadline - Date.now()));
    if (m.msg.case === kind) return m.msg as Extract<ConnectResponse['msg'], { case: C }>;
  }
}

describe('an agent that ignores its timeout', () => {
  it('gets a Cancel, its attempt is recorded timed out, and the retry runs', { timeout: 60_000 }, async () => {
    const api = createClients(f.server.url);
    const agent = scriptedAgent(f.server.url, { keepaliveMs: 150 });
    try {
      agent.outbox.push({
        msg: {
          case: 'hello',
          value: {
            protocolVersion: ProtocolVersion.PROTOCOL_VERSION_2,
            agentId: 'deaf-to-timeouts',
            slots: 2,
            incarnationId: randomUUID(),
          },
        },
      });
      expect((await agent.inbox.next()).msg.case).toBe('welcome');
      const runId = (await f.api.workflow.triggerRun({ dagId: 'slow' })).run!.runId;

      const first = (await nextOf(agent.inbox, 'assign', 10_000)).value;
      expect(first.attempt!.tryNumber).toBe(1);
      expect(Number(first.timeout!.seconds) * 1000 + first.timeout!.nanos / 1e6).toBe(TIMEOUT_MS);
      // Started, and then never stopped: the agent lists it in every keepalive.
      agent.outbox.push({ msg: { case: 'started', value: { attempt: first.attempt!, pid: 4242 } } });
      agent.held.set(first.attempt!.tiId, first.attempt!);
      const startedAt = Date.now();

      const cancel = (await nextOf(agent.inbox, 'cancel', 20_000)).value;
      const cancelMs = Date.now() - startedAt;
      expect(cancel.attempt).toMatchObject({
        tiId: first.attempt!.tiId,
        tryNumber: 1,
        attemptToken: first.attempt!.attemptToken,
      });
      expect(cancel.reason).toBe(`timed out after ${TIMEOUT_MS} ms`);
      // Not before the holder had its own chance (timeout, kill grace, the time for its report),
      // and soon after.
      expect(cancelMs).toBeGreaterThanOrEqual(TIMEOUT_MS + KILL_GRACE_MS + END_REPORT_MS);
      expect(cancelMs).toBeLessThan(TIMEOUT_MS + KILL_GRACE_MS + END_REPORT_MS + 3000);

      const [ended] = await f.db.sql<{ error: string | null; payload: Record<string, unknown> }[]>`
        select t.error, e.payload from events e join task_instances t on t.id = e.ti_id
        where e.ti_id = ${first.attempt!.tiId} and e.payload->>'reason' = 'timed_out'`;
      expect(ended!.payload).toMatchObject({ to: 'up_for_retry', try: 1 });
      expect(ended!.payload.error).toMatch(
        new RegExp(`^timed out after ${TIMEOUT_MS} ms \\(ended by the control plane`),
      );

      // The retry: try 2 comes to the same agent, which this time runs it to its end.
      const second = (await nextOf(agent.inbox, 'assign', 10_000)).value;
      expect(second.attempt!.tryNumber).toBe(2);
      expect(second.attempt!.attemptToken).not.toBe(first.attempt!.attemptToken);
      agent.held.delete(first.attempt!.tiId);
      agent.outbox.push({ msg: { case: 'started', value: { attempt: second.attempt!, pid: 4243 } } });
      agent.outbox.push({
        msg: { case: 'finished', value: { attempt: second.attempt!, outcome: AttemptOutcome.SUCCESS, exitCode: 0 } },
      });
      expect((await nextOf(agent.inbox, 'finishedAck', 5_000)).value).toMatchObject({
        attempt: { tryNumber: 2 },
        applied: true,
      });
      await waitFor(
        'run success',
        async () => (await f.api.workflow.getRun({ runId })).run!.state === RunState.SUCCESS,
        10_000,
      );
      const ti = (await f.api.workflow.getRun({ runId })).taskInstances[0]!;
      expect(ti).toMatchObject({ tryNumber: 2, exitCode: 0, agentId: 'deaf-to-timeouts' });

      // The first try's end is the control plane's: a late Finished from the agent is refused.
      agent.outbox.push({
        msg: { case: 'finished', value: { attempt: first.attempt!, outcome: AttemptOutcome.SUCCESS, exitCode: 0 } },
      });
      const ack = (await nextOf(agent.inbox, 'finishedAck', 5_000)).value;
      expect(ack).toMatchObject({ attempt: { tryNumber: 1 }, applied: false });
    } finally {
      agent.close();
      await agent.done;
    }
  });
});
