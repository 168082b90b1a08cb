import { randomUUID } from 'node:crypto';

import { Code, ConnectError, createClient } from '@connectrpc/connect';
import { createGrpcTransport } from '@connectrpc/connect-node';
import { beforeAll, describe, expect, it } from 'vitest';
import { createClients } from '../../src/cli/client.js';
import {
  AgentService,
  AttemptOutcome,
  ProtocolVersion,
  type ConnectResponse,
} from '../../src/gen/leoflow/v1/agent_pb.js';
import { cli, startAgent, waitFor } from '../helpers/leoflow-process.js';
import { AsyncInbox } from '../helpers/scripted-agent.js';
import { serverForFile } from '../helpers/server-fixture.js';
import { applyDag } from '../helpers/applied-dag.js';

/**
 * The control plane's side of AgentService.Connect, driven by a scripted agent speaking the
 * protocol message by message (the way an agent in another language would), against the real
 * server process.
 */

const f = serverForFile({
  tmpPrefix: 'leoflow-agentproto-',
  args: ['--heartbeat-interval', '300ms', '--heartbeat-threshold', '2s'],
});

beforeAll(async () => {
  await applyDag(
    f.server.url,
    f.tmp,
    'dag_id: gpu\ntasks:\n  - id: train\n    executor: agents\n    command: [echo, training]\n    placement: { labels: { gpu: nvidia } }\n',
  );
});

/** A scripted agent: the test pushes its messages; with `keepalive`, it also keeps alive every 150 ms. */
function connect(opts: { keepalive?: boolean } = { keepalive: true }) {
  const client = createClient(AgentService, createGrpcTransport({ baseUrl: f.server.url }));
  const outbox = new AsyncInbox<Parameters<typeof client.connect>[0] extends AsyncIterable<infer T> ? T : never>();
  const stream = client.connect(outbox);
  const inbox = new AsyncInbox<ConnectResponse>();
  let seq = 100n;
  const pump = opts.keepalive
    ? setInterval(() => outbox.push({ msg: { case: 'keepalive', value: { seq: seq++, held: [] } } }), 150)
    : null;
  const done = (async () => {
    for await (const m of stream) if (m.msg.case !== 'keepaliveAck') inbox.push(m);
  })()
    .then(
      () => inbox.close(),
      (err: unknown) => inbox.close(err),
    )
    .finally(() => pump && clearInterval(pump));
  const close = () => {
    if (pump) clearInterval(pump);
    outbox.close();
  };
  return { outbox, inbox, done, close };
}

describe('AgentService.Connect (control-plane side)', () => {
  it('refuses an unknown protocol version with a clear error', async () => {
    const { outbox, inbox } = connect({ keepalive: false });
    outbox.push({
      msg: {
        case: 'hello',
        value: { protocolVersion: 99 as ProtocolVersion, agentId: 'old-agent', slots: 1, incarnationId: randomUUID() },
      },
    });
    const err = await inbox.next().then(
      () => null,
      (e: unknown) => ConnectError.from(e),
    );
    outbox.close();
    expect(err?.code).toBe(Code.FailedPrecondition);
    expect(err?.rawMessage).toBe('agent speaks protocol version 99; this control plane speaks 2');
  });

  it('keeps a TI waiting with NO_AGENT_WITH_LABELS, dispatches it the moment a matching agent connects, and records its reports', async () => {
    const api = createClients(f.server.url);
    const runId = (await f.api.workflow.triggerRun({ dagId: 'gpu' })).run!.runId;
    await waitFor('reason NO_AGENT_WITH_LABELS', async () => {
      const r = await f.api.workflow.getRun({ runId });
      return r.taskInstances[0]!.pendingReason === 'NO_AGENT_WITH_LABELS:gpu=nvidia';
    });

    const { outbox, inbox, done, close } = connect();
    outbox.push({
      msg: {
        case: 'hello',
        value: {
          protocolVersion: ProtocolVersion.PROTOCOL_VERSION_2,
          agentId: 'gpu-1',
          labels: { gpu: 'nvidia' },
          slots: 2,
          incarnationId: randomUUID(),
        },
      },
    });
    const welcome = await inbox.next();
    expect(welcome.msg.case).toBe('welcome');
    const connectedAt = Date.now();
    const assign = await inbox.next();
    expect(assign.msg.case).toBe('assign');
    // Dispatched on connect, not at the next tick.
    expect(Date.now() - connectedAt).toBeLessThan(900);
    const a = assign.msg.case === 'assign' ? assign.msg.value : null;
    expect(a!.command).toEqual(['echo', 'training']);
    expect(a!.env.LEOFLOW_TRY_NUMBER).toBe('1');
    const attempt = a!.attempt!;
    outbox.push({ msg: { case: 'started', value: { attempt, pid: 4242 } } });
    outbox.push({ msg: { case: 'keepalive', value: { seq: 1n, held: [attempt] } } });
    outbox.push({
      msg: { case: 'log', value: { attempt, entries: [{ seq: 1, stream: 'stdout', line: 'training' }] } },
    });
    outbox.push({ msg: { case: 'finished', value: { attempt, outcome: AttemptOutcome.SUCCESS, exitCode: 0 } } });
    const seen: string[] = [];
    for (;;) {
      const m = await inbox.next();
      seen.push(m.msg.case ?? '');
      if (m.msg.case === 'finishedAck') {
        expect(m.msg.value.applied).toBe(true);
        break;
      }
    }
    await waitFor('run success', async () => (await f.api.workflow.getRun({ runId })).run!.state === 3);
    const ti = (await f.api.workflow.getRun({ runId })).taskInstances[0]!;
    expect(ti).toMatchObject({ agentId: 'gpu-1', tryNumber: 1, exitCode: 0 });
    const logs = await cli(f.server.url, ['logs', runId]);
    expect(logs.stdout).toContain('[train #1] training');
    // A late duplicate Finished (as after a reconnect) is acknowledged, not counted as a zombie.
    outbox.push({ msg: { case: 'finished', value: { attempt, outcome: AttemptOutcome.SUCCESS, exitCode: 0 } } });
    let again = await inbox.next();
    while (again.msg.case !== 'finishedAck') {
      expect(again.msg.case, 'no Cancel for an attempt that ended normally').not.toBe('cancel');
      again = await inbox.next();
    }
    expect(again.msg.value.applied).toBe(true);
    const agents = await f.api.cluster.listAgents({});
    expect(agents.agents.map((x) => [x.agentId, x.connected, x.slots])).toEqual([['gpu-1', true, 2]]);
    close();
    await done;
    await waitFor('agent disconnected', async () => !(await f.api.cluster.listAgents({})).agents[0]!.connected);
  });

  it('closes a deaf stream (no keepalives) and stops counting the agent as connected', async () => {
    const api = createClients(f.server.url);
    const { outbox, inbox } = connect({ keepalive: false });
    outbox.push({
      msg: {
        case: 'hello',
        value: {
          protocolVersion: ProtocolVersion.PROTOCOL_VERSION_2,
          agentId: 'deaf-1',
          slots: 1,
          incarnationId: randomUUID(),
        },
      },
    });
    expect((await inbox.next()).msg.case).toBe('welcome');
    // Say nothing more: the connection stays up, but no keepalive arrives.
    const err = await (async () => {
      for (;;) await inbox.next(5000);
    })().catch((e: unknown) => ConnectError.from(e));
    expect(err.code).toBe(Code.DeadlineExceeded);
    expect(err.rawMessage).toMatch(/no keepalive for 3 intervals/);
    await waitFor('deaf agent disconnected', async () => {
      const a = (await f.api.cluster.listAgents({})).agents.find((x) => x.agentId === 'deaf-1');
      return a && !a.connected;
    });
    outbox.close();
  });

  it('resumes held work after a reconnect, supersedes what is no longer current, drains and cancels', async () => {
    const api = createClients(f.server.url);
    // One agent process, reconnecting: the same incarnation on both streams.
    const incarnationId = randomUUID();
    const hello = (held: { tiId: string; tryNumber: number; attemptToken: string }[] = []) => ({
      msg: {
        case: 'hello' as const,
        value: {
          protocolVersion: ProtocolVersion.PROTOCOL_VERSION_2,
          agentId: 'gpu-2',
          labels: { gpu: 'nvidia' },
          slots: 1,
          held,
          incarnationId,
        },
      },
    });
    const first = connect();
    first.outbox.push(hello());
    expect((await first.inbox.next()).msg.case).toBe('welcome');
    const runId = (await f.api.workflow.triggerRun({ dagId: 'gpu' })).run!.runId;
    let m = await first.inbox.next();
    while (m.msg.case !== 'assign') m = await first.inbox.next();
    const attempt = m.msg.value.attempt!;
    first.outbox.push({ msg: { case: 'started', value: { attempt, pid: 1 } } });
    // The stream breaks (a network blip) and the agent comes back within the threshold.
    first.close();
    await first.done;
    const second = connect();
    const bogus = {
      tiId: attempt.tiId,
      tryNumber: attempt.tryNumber,
      attemptToken: '00000000-0000-4000-8000-000000000000',
    };
    second.outbox.push(
      hello([{ tiId: attempt.tiId, tryNumber: attempt.tryNumber, attemptToken: attempt.attemptToken }, bogus]),
    );
    const welcome = await second.inbox.next();
    expect(welcome.msg.case).toBe('welcome');
    if (welcome.msg.case !== 'welcome') return;
    expect(welcome.msg.value.resumed.map((r) => r.attemptToken)).toEqual([attempt.attemptToken]);
    expect(welcome.msg.value.superseded.map((r) => r.attemptToken)).toEqual([bogus.attemptToken]);
    second.outbox.push({ msg: { case: 'keepalive', value: { seq: 1n, held: [attempt] } } });

    // Drained: the agent is told, and gets no new work.
    await f.api.cluster.drainAgent({ agentId: 'gpu-2' });
    let d = await second.inbox.next();
    while (d.msg.case !== 'drain') d = await second.inbox.next();
    const run2 = (await f.api.workflow.triggerRun({ dagId: 'gpu' })).run!.runId;
    // It waits saying the only agent with its labels drains (not that there is none).
    await waitFor(
      'run 2 waits',
      async () =>
        (await f.api.workflow.getRun({ runId: run2 })).taskInstances[0]!.pendingReason ===
        'AGENT_DRAINING:1 agent with gpu=nvidia',
    );

    // Cancelling the run reaches the agent as Cancel for its attempt.
    await f.api.workflow.cancelRun({ runId });
    let c = await second.inbox.next();
    while (c.msg.case !== 'cancel') c = await second.inbox.next();
    expect(c.msg.value.attempt!.attemptToken).toBe(attempt.attemptToken);
    second.outbox.push({
      msg: {
        case: 'finished',
        value: { attempt, outcome: AttemptOutcome.CANCELLED, signal: 'SIGTERM', error: 'cancelled' },
      },
    });
    let ack = await second.inbox.next();
    while (ack.msg.case !== 'finishedAck') ack = await second.inbox.next();
    const ti = (await f.api.workflow.getRun({ runId })).taskInstances[0]!;
    expect(ti).toMatchObject({ state: 10, tryNumber: 1, agentId: 'gpu-2' });
    // Undrained: the waiting run is dispatched to it.
    await f.api.cluster.drainAgent({ agentId: 'gpu-2', undrain: true });
    await f.api.workflow.cancelRun({ runId: run2 }).catch(() => {});
    second.close();
    await second.done;
  });
});

describe('one-shot agent (leoflow agent --once --ti)', () => {
  it('runs exactly its task instance and exits', async () => {
    const { startAgent } = await import('../helpers/leoflow-process.js');
    await applyDag(
      f.server.url,
      f.tmp,
      'dag_id: once\ntasks:\n  - id: job\n    executor: agents\n    command: ["sh", "-c", "echo one-shot $LEOFLOW_TRY_NUMBER"]\n',
    );
    const api = createClients(f.server.url);
    const runId = (await f.api.workflow.triggerRun({ dagId: 'once' })).run!.runId;
    const tiId = await waitFor('ti scheduled', async () => {
      const r = await f.api.workflow.getRun({ runId });
      return r.taskInstances[0]!.state === 2 ? r.taskInstances[0]!.tiId : null;
    });
    const agent = startAgent(f.server.url, ['--id', 'pod-once-1', '--once', '--ti', tiId]);
    const exit = await Promise.race([
      agent.exited,
      new Promise<never>((_, reject) =>
        setTimeout(() => reject(new Error(`one-shot agent did not exit:\n${agent.output()}`)), 20_000),
      ),
    ]);
    expect(exit.code, agent.output()).toBe(0);
    // The agent leaves once its Finished is acknowledged; the run ends at the step that follows.
    await waitFor('run success', async () => (await f.api.workflow.getRun({ runId })).run!.state === 3);
    const r = await f.api.workflow.getRun({ runId });
    expect(r.taskInstances[0]).toMatchObject({ agentId: 'pod-once-1', tryNumber: 1, exitCode: 0 });
    expect((await cli(f.server.url, ['logs', runId])).stdout).toContain('[job #1] one-shot 1');
  });
});
