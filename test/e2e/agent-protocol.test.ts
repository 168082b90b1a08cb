import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { AsyncInbox } from '../helpers/scripted-agent.js';
import os from 'node:os';
import path from 'node:path';
import { Code, ConnectError, createClient } from '@connectrpc/connect';
import { createGrpcTransport } from '@connectrpc/connect-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createClients } from '../../src/cli/client.js';
import { AgentService, AttemptOutcome, ProtocolVersion, type ConnectResponse } from '../../src/gen/leoflow/v1/agent_pb.js';
import { cli, startServer, waitFor, type ServerProcess } from '../helpers/leoflow-process.js';
import { createTestDatabase, type TestDatabase } from '../helpers/test-database.js';

/**
 * The control plane's side of AgentService.Connect, driven by a scripted agent speaking the
 * protocol message by message (the way an agent in another language would), against the real
 * server process.
 */

let db: TestDatabase;
let server: ServerProcess;
let tmp: string;

beforeAll(async () => {
  db = await createTestDatabase();
  tmp = await mkdtemp(path.join(os.tmpdir(), 'leoflow-agentproto-'));
  server = await startServer({ env: { DATABASE_URL: db.url }, args: ['--heartbeat-interval', '300ms', '--heartbeat-threshold', '2s'] });
  const file = path.join(tmp, 'gpu.yaml');
  await writeFile(file, 'dag_id: gpu\ntasks:\n  - id: train\n    executor: agents\n    command: [echo, training]\n    placement: { labels: { gpu: nvidia } }\n');
  expect((await cli(server.url, ['dag', 'apply', file])).code).toBe(0);
});
afterAll(async () => {
  await server?.stop();
  await db?.drop();
  await rm(tmp, { recursive: true, force: true });
});

function connect() {
  const client = createClient(AgentService, createGrpcTransport({ baseUrl: server.url }));
  const outbox = new AsyncInbox<Parameters<typeof client.connect>[0] extends AsyncIterable<infer T> ? T : never>();
  const stream = client.connect(outbox);
  const inbox = new AsyncInbox<ConnectResponse>();
  const done = (async () => {
    for await (const m of stream) inbox.push(m);
  })().then(
    () => inbox.close(),
    (err: unknown) => inbox.close(err),
  );
  return { outbox, inbox, done };
}

describe('AgentService.Connect (control-plane side)', () => {
  it('refuses an unknown protocol version with a clear error', async () => {
    const { outbox, inbox } = connect();
    outbox.push({ msg: { case: 'hello', value: { protocolVersion: 99 as ProtocolVersion, agentId: 'old-agent', slots: 1 } } });
    const err = await inbox.next().then(
      () => null,
      (e: unknown) => ConnectError.from(e),
    );
    outbox.close();
    expect(err?.code).toBe(Code.FailedPrecondition);
    expect(err?.rawMessage).toBe('agent speaks protocol version 99; this control plane speaks 1');
  });

  it('keeps a TI waiting with NO_AGENT_WITH_LABELS, dispatches it the moment a matching agent connects, and records its reports', async () => {
    const api = createClients(server.url);
    const runId = (await api.workflow.triggerRun({ dagId: 'gpu' })).run!.runId;
    await waitFor('reason NO_AGENT_WITH_LABELS', async () => {
      const r = await api.workflow.getRun({ runId });
      return r.taskInstances[0]!.pendingReason === 'NO_AGENT_WITH_LABELS:gpu=nvidia';
    });

    const { outbox, inbox, done } = connect();
    outbox.push({ msg: { case: 'hello', value: { protocolVersion: ProtocolVersion.PROTOCOL_VERSION_1, agentId: 'gpu-1', labels: { gpu: 'nvidia' }, slots: 2 } } });
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
    outbox.push({ msg: { case: 'log', value: { attempt, entries: [{ seq: 1, stream: 'stdout', line: 'training' }] } } });
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
    expect(seen).toContain('keepaliveAck');
    await waitFor('run success', async () => (await api.workflow.getRun({ runId })).run!.state === 3);
    const ti = (await api.workflow.getRun({ runId })).taskInstances[0]!;
    expect(ti).toMatchObject({ agentId: 'gpu-1', tryNumber: 1, exitCode: 0 });
    const logs = await cli(server.url, ['logs', runId]);
    expect(logs.stdout).toContain('[train #1] training');
    // A late duplicate Finished (as after a reconnect) is acknowledged, not counted as a zombie.
    outbox.push({ msg: { case: 'finished', value: { attempt, outcome: AttemptOutcome.SUCCESS, exitCode: 0 } } });
    let again = await inbox.next();
    while (again.msg.case !== 'finishedAck') {
      expect(again.msg.case, 'no Cancel for an attempt that ended normally').not.toBe('cancel');
      again = await inbox.next();
    }
    expect(again.msg.value.applied).toBe(true);
    const agents = await api.cluster.listAgents({});
    expect(agents.agents.map((x) => [x.agentId, x.connected, x.slots])).toEqual([['gpu-1', true, 2]]);
    outbox.close();
    await done;
    await waitFor('agent disconnected', async () => !(await api.cluster.listAgents({})).agents[0]!.connected);
  });
});

