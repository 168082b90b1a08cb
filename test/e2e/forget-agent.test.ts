import { randomUUID } from 'node:crypto';

import { Code, ConnectError, createClient } from '@connectrpc/connect';
import { createGrpcTransport } from '@connectrpc/connect-node';
import { beforeAll, describe, expect, it } from 'vitest';
import { createClients } from '../../src/cli/client.js';
import { AgentService, ProtocolVersion, type ConnectResponse } from '../../src/gen/leoflow/v1/agent_pb.js';
import { cli, startServer, waitFor } from '../helpers/leoflow-process.js';
import { scrapeMetrics } from '../helpers/scrape-metrics.js';
import { AsyncInbox, type AgentMessage } from '../helpers/scripted-agent.js';
import { serverForFile } from '../helpers/server-fixture.js';
import { createTestDatabase } from '../helpers/test-database.js';
import { applyDag } from '../helpers/applied-dag.js';

/**
 * Forgetting agents against the real server: `leoflow agents forget` and ForgetAgent (each
 * refusal's code and message, an agent gone from `agents list`, its id back as a new agent), and
 * the leader forgetting by itself an agent gone longer than --agent-retention.
 */

// Connected: kept alive within 3 × 300 ms. The heartbeat threshold is long, so an attempt of a
// gone agent stays running for the test (the reaper would end it as lost).
const f = serverForFile({
  tmpPrefix: 'leoflow-forget-',
  args: ['--heartbeat-interval', '300ms', '--heartbeat-threshold', '60s'],
});

beforeAll(async () => {
  // Connected: kept alive within 3 × 300 ms. The heartbeat threshold is long, so an attempt of a
  // gone agent stays running for the test (the reaper would end it as lost).
  await applyDag(
    f.server.url,
    f.tmp,
    'dag_id: forget\ntasks:\n  - id: train\n    executor: agents\n    command: [sleep, "60"]\n    placement: { labels: { pool: forget } }\n',
  );
});

/** A scripted agent that says Hello and keeps alive every 150 ms until closed. */
async function connect(agentId: string, labels: Record<string, string> = {}, url = f.server.url) {
  const client = createClient(AgentService, createGrpcTransport({ baseUrl: url }));
  const outbox = new AsyncInbox<AgentMessage>();
  const inbox = new AsyncInbox<ConnectResponse>();
  let seq = 1n;
  const pump = setInterval(() => outbox.push({ msg: { case: 'keepalive', value: { seq: seq++, held: [] } } }), 150);
  const done = (async () => {
    for await (const m of client.connect(outbox)) if (m.msg.case !== 'keepaliveAck') inbox.push(m);
  })()
    .then(
      () => inbox.close(),
      (err: unknown) => inbox.close(err),
    )
    .finally(() => clearInterval(pump));
  outbox.push({
    msg: {
      case: 'hello',
      value: {
        protocolVersion: ProtocolVersion.PROTOCOL_VERSION_2,
        agentId,
        labels,
        slots: 1,
        incarnationId: randomUUID(),
      },
    },
  });
  expect((await inbox.next()).msg.case).toBe('welcome');
  const close = async () => {
    clearInterval(pump);
    outbox.close();
    await done;
  };
  return { outbox, inbox, close };
}

async function refusal(agentId: string): Promise<ConnectError> {
  const err = await createClients(f.server.url)
    .cluster.forgetAgent({ agentId })
    .then(
      () => null,
      (e: unknown) => ConnectError.from(e),
    );
  expect(err, `ForgetAgent ${agentId} refused`).not.toBeNull();
  return err!;
}

const listed = async () => (await createClients(f.server.url).cluster.listAgents({})).agents.map((a) => a.agentId);

describe('leoflow agents forget', () => {
  it('answers NOT_FOUND for an unknown id, and INVALID_ARGUMENT for none', async () => {
    const err = await refusal('nobody');
    expect(err.code).toBe(Code.NotFound);
    expect(err.rawMessage).toBe('agent "nobody" not found');
    const r = await cli(f.server.url, ['agents', 'forget', 'nobody']);
    expect(r.code).toBe(1);
    expect(r.stderr).toBe('leoflow: [not_found] agent "nobody" not found\n');
    const empty = await refusal('');
    expect(empty.code).toBe(Code.InvalidArgument);
    expect(empty.rawMessage).toBe('agent_id: is required');
  });

  it('refuses a connected agent with FAILED_PRECONDITION, saying to stop it first', async () => {
    const a = await connect('live-1');
    try {
      const err = await refusal('live-1');
      expect(err.code).toBe(Code.FailedPrecondition);
      expect(err.rawMessage).toMatch(
        /^agent "live-1" is connected \(to replica [^,]+, last seen \d+(ms|s) ago\): only a disconnected agent can be forgotten; stop the agent first \(`leoflow agents drain live-1` lets it finish its work\)$/,
      );
      const r = await cli(f.server.url, ['agents', 'forget', 'live-1']);
      expect(r.code).toBe(1);
      expect(r.stderr).toMatch(/^leoflow: \[failed_precondition\] agent "live-1" is connected /);
      expect(await listed()).toContain('live-1');
    } finally {
      await a.close();
    }
  });

  it('refuses a gone agent that an attempt still names, until that attempt is cancelled; then forgets it, and the id comes back as a new agent', async () => {
    const api = createClients(f.server.url);
    const runId = (await f.api.workflow.triggerRun({ dagId: 'forget' })).run!.runId;
    const a = await connect('holder-1', { pool: 'forget' });
    const assign = await a.inbox.next();
    expect(assign.msg.case).toBe('assign');
    const attempt = assign.msg.case === 'assign' ? assign.msg.value.attempt! : null;
    a.outbox.push({ msg: { case: 'started', value: { attempt: attempt!, pid: 4242 } } });
    await waitFor('task running', async () => (await f.api.workflow.getRun({ runId })).taskInstances[0]!.state === 4);
    expect((await f.api.cluster.drainAgent({ agentId: 'holder-1' })).agent!.draining).toBe(true);
    await a.close();
    await waitFor(
      'agent disconnected',
      async () => !(await f.api.cluster.listAgents({})).agents.find((x) => x.agentId === 'holder-1')!.connected,
    );

    const err = await refusal('holder-1');
    expect(err.code).toBe(Code.FailedPrecondition);
    expect(err.rawMessage).toBe(
      `agent "holder-1" still holds 1 attempt (run ${runId} task train running): only an agent no queued or running attempt names can be forgotten; ` +
        'cancel them (`leoflow run cancel RUN --task TASK`) or wait for them to end (an attempt whose agent is gone is ended as lost 1m after its last heartbeat)',
    );
    const refused = await cli(f.server.url, ['agents', 'forget', 'holder-1']);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toBe(`leoflow: [failed_precondition] ${err.rawMessage}\n`);

    // What the message says to do.
    expect((await cli(f.server.url, ['run', 'cancel', runId, '--task', 'train'])).code).toBe(0);
    const ok = await cli(f.server.url, ['agents', 'forget', 'holder-1']);
    expect(ok.stderr).toBe('');
    expect(ok.code).toBe(0);
    expect(ok.stdout).toMatch(/^agent holder-1 forgotten \(last seen \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}\)\n$/);
    const list = await cli(f.server.url, ['agents', 'list', '-o', 'json']);
    expect((JSON.parse(list.stdout) as { agent_id: string }[]).map((x) => x.agent_id)).not.toContain('holder-1');
    // The task keeps the name of the agent that ran it.
    expect((await f.api.workflow.getRun({ runId })).taskInstances[0]!.agentId).toBe('holder-1');
    expect((await scrapeMetrics(f.server.metricsUrl)).get('leoflow_agents_forgotten_total{how="by_hand"}')).toBe(1);

    // The same id connects again: a new agent, not drained as the forgotten one was.
    const back = await connect('holder-1', { pool: 'other' });
    try {
      const again = (await f.api.cluster.listAgents({})).agents.find((x) => x.agentId === 'holder-1');
      expect(again).toMatchObject({ connected: true, draining: false, labels: { pool: 'other' } });
    } finally {
      await back.close();
    }
  });
});

describe('--agent-retention', () => {
  it('has the leader forget an agent gone longer, counted and logged, and keep a connected one', async () => {
    const own = await createTestDatabase();
    const short = await startServer({
      env: { DATABASE_URL: own.url },
      args: ['--heartbeat-interval', '300ms', '--agent-retention', '1s'],
    });
    const kept = await connect('stays-1', {}, short.url);
    try {
      const gone = await connect('brief-1', {}, short.url);
      await gone.close();
      const names = async () => (await createClients(short.url).cluster.listAgents({})).agents.map((a) => a.agentId);
      await waitFor(
        'an agent gone longer than the agent retention (1s) forgotten',
        async () => !(await names()).includes('brief-1'),
        45_000,
        250,
      );
      expect(await names()).toEqual(['stays-1']);
      expect((await scrapeMetrics(short.metricsUrl)).get('leoflow_agents_forgotten_total{how="retention"}')).toBe(1);
      expect(
        short.logs.some(
          (l) =>
            l.component === 'history' &&
            /^forgot 1 agent/.test(String(l.msg)) &&
            JSON.stringify(l.agentIds) === '["brief-1"]',
        ),
      ).toBe(true);
    } finally {
      await kept.close();
      await short.stop();
      await own.drop();
    }
  });
});
