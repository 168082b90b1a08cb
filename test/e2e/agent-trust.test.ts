import { randomUUID } from 'node:crypto';
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { create, type MessageInitShape } from '@bufbuild/protobuf';
import { Code, ConnectError, createClient } from '@connectrpc/connect';
import { createGrpcTransport } from '@connectrpc/connect-node';
import { beforeAll, describe, expect, it } from 'vitest';
import { createClients } from '../../src/cli/client.js';
import {
  AgentService,
  AttemptOutcome,
  ConnectRequestSchema,
  ProtocolVersion,
  type AttemptRef,
  type ConnectRequest,
  type ConnectResponse,
} from '../../src/gen/leoflow/v1/agent_pb.js';
import { cli, waitFor } from '../helpers/leoflow-process.js';
import { scrapeMetrics } from '../helpers/scrape-metrics.js';
import { AsyncInbox } from '../helpers/scripted-agent.js';
import { serverForFile } from '../helpers/server-fixture.js';

/**
 * What the control plane trusts an agent with (issue 22): an attempt given to one agent process
 * is never given, with the same token, to another (a restarted agent gets a new try); a bad report
 * is refused to its sender alone, never poisoning the writes other agents share; and a duplicate
 * agent id cannot take a live agent's place. Scripted agents speak the protocol message by message
 * against the real server process.
 */

const api = () => createClients(f.server.url);

// A threshold far above every test here: whatever ends an attempt early, it is not the reaper.
const f = serverForFile({
  tmpPrefix: 'leoflow-agenttrust-',
  args: ['--heartbeat-interval', '300ms', '--heartbeat-threshold', '120s'],
});

beforeAll(async () => {
  // A threshold far above every test here: whatever ends an attempt early, it is not the reaper.
  const dags: Record<string, string> = {
    restart:
      'dag_id: restart\ntasks:\n  - id: delayed\n    executor: agents\n    retries: 1\n    retry_delay: 100ms\n    placement: { labels: { pool: restart } }\n    command: [echo, hi]\n',
    adopt:
      'dag_id: adopt\ntasks:\n  - id: kept\n    executor: agents\n    placement: { labels: { pool: adopt } }\n    command: [echo, hi]\n',
    hb: 'dag_id: hb\ntasks:\n  - id: beat\n    executor: agents\n    placement: { labels: { pool: hb } }\n    command: [echo, hi]\n',
    pair: 'dag_id: pair\ntasks:\n  - id: slowpoke\n    executor: agents\n    placement: { labels: { pool: pair } }\n    command: [echo, hi]\n  - id: work\n    executor: agents\n    placement: { labels: { pool: pair } }\n    command: [echo, hi]\n',
    dup: 'dag_id: dup\ntasks:\n  - id: job\n    executor: agents\n    placement: { labels: { pool: dup } }\n    command: [echo, hi]\n',
  };
  for (const [name, text] of Object.entries(dags)) {
    const file = path.join(f.tmp, `${name}.yaml`);
    await writeFile(file, text);
    expect((await cli(f.server.url, ['dag', 'apply', file])).code).toBe(0);
  }
  // Slow writes on demand: a start or an end of these tasks takes this long in Postgres, holding
  // its row, as on a slow or briefly unreachable database.
  await f.db.sql.unsafe(`
    create function slow_write() returns trigger language plpgsql as $$
    begin perform pg_sleep(tg_argv[0]::float); return new; end $$;
    create trigger slow_start_delayed before update on task_instances for each row
      when (old.task_id = 'delayed' and old.state = 'queued' and new.state = 'running' and old.try_number = 1) execute function slow_write(4);
    create trigger slow_start_slowpoke before update on task_instances for each row
      when (old.task_id = 'slowpoke' and old.state = 'queued' and new.state = 'running') execute function slow_write(1.5);
    create trigger slow_end_slowpoke before update on task_instances for each row
      when (old.task_id = 'slowpoke' and old.state = 'running' and new.state = 'success') execute function slow_write(1.5);`);
});

type Msg = MessageInitShape<typeof ConnectRequestSchema>['msg'];

/**
 * A scripted agent process: Hello with its own incarnation (or the one given, for the same process
 * reconnecting); then it keeps alive every 150 ms listing `held()` (bad agents list what they like).
 */
function agentProcess(o: {
  agentId: string;
  pool: string;
  slots?: number;
  incarnationId?: string;
  protocolVersion?: ProtocolVersion;
  held?: AttemptRef[];
  keepaliveHeld?: () => AttemptRef[];
}) {
  const incarnationId = o.incarnationId ?? randomUUID();
  const client = createClient(AgentService, createGrpcTransport({ baseUrl: f.server.url }));
  const outbox = new AsyncInbox<ConnectRequest>();
  const stream = client.connect(outbox);
  const inbox = new AsyncInbox<ConnectResponse>();
  let seq = 1n;
  const send = (msg: Msg) => outbox.push(create(ConnectRequestSchema, { msg }));
  send({
    case: 'hello',
    value: {
      protocolVersion: o.protocolVersion ?? ProtocolVersion.PROTOCOL_VERSION_2,
      agentId: o.agentId,
      labels: { pool: o.pool },
      slots: o.slots ?? 1,
      held: o.held ?? [],
      incarnationId,
    },
  });
  const pump = setInterval(
    () => send({ case: 'keepalive', value: { seq: seq++, held: o.keepaliveHeld?.() ?? [] } }),
    150,
  );
  /** How the stream ended: null when the server ended it OK. */
  const ended = (async () => {
    for await (const m of stream) if (m.msg.case !== 'keepaliveAck') inbox.push(m);
  })()
    .then(
      () => (inbox.close(), null),
      (err: unknown) => (inbox.close(err), ConnectError.from(err)),
    )
    .finally(() => clearInterval(pump));
  return {
    incarnationId,
    inbox,
    ended,
    send,
    /** The next message of this kind (others are skipped). */
    async next<K extends NonNullable<ConnectResponse['msg']['case']>>(
      kind: K,
      timeoutMs = 10_000,
    ): Promise<Extract<ConnectResponse['msg'], { case: K }>['value']> {
      for (;;) {
        const m = await inbox.next(timeoutMs);
        if (m.msg.case === kind) return m.msg.value as never;
      }
    },
    /** The agent process goes away: its stream ends. */
    async close() {
      clearInterval(pump);
      outbox.close();
      await ended;
    },
  };
}

const tiRow = async (tiId: string) =>
  (
    await f.db.sql<
      {
        state: string;
        try_number: number;
        attempt_token: string | null;
        heartbeat_at: Date | null;
        error: string | null;
        delivered_to: string | null;
      }[]
    >`
    select state, try_number, attempt_token, heartbeat_at, error, delivered_to from task_instances where id = ${tiId}`
  )[0]!;

async function disconnected(agentId: string): Promise<void> {
  await waitFor(
    `${agentId} disconnected`,
    async () => !(await api().cluster.listAgents({})).agents.find((a) => a.agentId === agentId)?.connected,
  );
}

describe('incarnations: an attempt given to one agent process never reaches another with the same token', () => {
  it('a restarted agent does not get the attempt its earlier process was given while its Started was still being written: that try ends as lost, and a new try with a new token is sent', async () => {
    const first = agentProcess({ agentId: 'restart-1', pool: 'restart' });
    await first.next('welcome');
    const runId = (await api().workflow.triggerRun({ dagId: 'restart' })).run!.runId;
    const assign = await first.next('assign');
    const try1 = assign.attempt!;
    expect(try1.tryNumber).toBe(1);
    // The process runs and reports Started, whose write takes 4 s; meanwhile the agent restarts.
    first.send({ case: 'started', value: { attempt: try1, pid: 4242 } });
    await waitFor(
      'the Started write under way',
      async () => (await f.db.sql`select 1 from pg_stat_activity where wait_event = 'PgSleep'`).length > 0,
    );
    await first.close();
    await disconnected('restart-1');
    expect((await tiRow(try1.tiId)).state).toBe('queued');

    const second = agentProcess({ agentId: 'restart-1', pool: 'restart' });
    const welcome = await second.next('welcome');
    expect(welcome.resumed).toEqual([]);
    const next = await second.next('assign');
    // Never try 1's token again: try 2, a token of its own.
    expect(next.attempt!.attemptToken).not.toBe(try1.attemptToken);
    expect(next.attempt!.tryNumber).toBe(2);
    second.send({ case: 'started', value: { attempt: next.attempt!, pid: 4343 } });
    second.send({ case: 'finished', value: { attempt: next.attempt!, outcome: AttemptOutcome.SUCCESS, exitCode: 0 } });
    expect((await second.next('finishedAck')).applied).toBe(true);
    await waitFor('run success', async () => (await api().workflow.getRun({ runId })).run!.state === 3);

    // Try 1 is recorded as lost because the agent restarted, naming the process it was given to.
    const ev = await f.db.sql<{ to: string; try: number; reason: string | null; error: string | null }[]>`
      select payload->>'to' as to, (payload->>'try')::int as try, payload->>'reason' as reason, payload->>'error' as error
      from events where ti_id = ${try1.tiId} and kind = 'ti.state' order by seq`;
    expect(ev.map((e) => e.to)).toEqual([
      'scheduled',
      'queued',
      'running',
      'up_for_retry',
      'scheduled',
      'queued',
      'running',
      'success',
    ]);
    expect(ev.filter((e) => e.to === 'queued').map((e) => e.try)).toEqual([1, 2]);
    const lost = ev.find((e) => e.to === 'up_for_retry')!;
    expect(lost.reason).toBe('agent_restarted');
    expect(lost.error).toContain(first.incarnationId);
    expect(lost.error).toContain(second.incarnationId);
    await second.close();
  });

  it('an attempt the new process still holds (re-attached after its restart) is bound to it and keeps running as the same try', async () => {
    const first = agentProcess({ agentId: 'adopt-1', pool: 'adopt' });
    await first.next('welcome');
    const runId = (await api().workflow.triggerRun({ dagId: 'adopt' })).run!.runId;
    const attempt = (await first.next('assign')).attempt!;
    first.send({ case: 'started', value: { attempt, pid: 4444 } });
    await waitFor('running', async () => (await tiRow(attempt.tiId)).state === 'running');
    expect((await tiRow(attempt.tiId)).delivered_to).toBe(first.incarnationId);
    await first.close();
    await disconnected('adopt-1');

    const second = agentProcess({ agentId: 'adopt-1', pool: 'adopt', held: [attempt], keepaliveHeld: () => [attempt] });
    const welcome = await second.next('welcome');
    expect(welcome.resumed.map((r) => r.attemptToken)).toEqual([attempt.attemptToken]);
    expect(await tiRow(attempt.tiId)).toMatchObject({
      state: 'running',
      try_number: 1,
      attempt_token: attempt.attemptToken,
      delivered_to: second.incarnationId,
    });
    second.send({ case: 'finished', value: { attempt, outcome: AttemptOutcome.SUCCESS, exitCode: 0 } });
    expect((await second.next('finishedAck')).applied).toBe(true);
    await waitFor('run success', async () => (await api().workflow.getRun({ runId })).run!.state === 3);
    await second.close();
  });

  it('tells an agent of protocol version 1, from before the incarnation id, to upgrade (FAILED_PRECONDITION)', async () => {
    const a = agentProcess({
      agentId: 'no-incarnation',
      pool: 'none',
      incarnationId: '',
      protocolVersion: ProtocolVersion.PROTOCOL_VERSION_1,
    });
    const err = await a.ended;
    expect(err?.code).toBe(Code.FailedPrecondition);
    expect(err?.rawMessage).toBe(
      'agent speaks protocol version 1 (before incarnation_id was required); this control plane speaks 2: upgrade the agent',
    );
  });

  it('refuses a version 2 Hello without its incarnation id, naming the field (INVALID_ARGUMENT)', async () => {
    const a = agentProcess({ agentId: 'v2-no-incarnation', pool: 'none', incarnationId: '' });
    const err = await a.ended;
    expect(err?.code).toBe(Code.InvalidArgument);
    expect(err?.rawMessage).toMatch(/^hello\.incarnation_id: must be a UUID made once per agent process/);
  });

  it('refuses an incarnation id that is not a UUID, naming the field', async () => {
    const a = agentProcess({ agentId: 'bad-incarnation', pool: 'none', incarnationId: 'not-a-uuid' });
    const err = await a.ended;
    expect(err?.code).toBe(Code.InvalidArgument);
    expect(err?.rawMessage).toMatch(
      /^hello\.incarnation_id: must be a UUID made once per agent process, got \{"fingerprint":"sha256:[0-9a-f]{12}","length":10\}$/,
    );
  });
});

describe('a bad report harms only its sender', () => {
  it("a Keepalive.held token that is not a UUID is refused to its sender alone; another agent's heartbeats keep being written", async () => {
    const good = agentProcess({ agentId: 'hb-good', pool: 'hb', keepaliveHeld: () => (held ? [held] : []) });
    let held: AttemptRef | null = null;
    await good.next('welcome');
    await api().workflow.triggerRun({ dagId: 'hb' });
    held = (await good.next('assign')).attempt!;
    good.send({ case: 'started', value: { attempt: held, pid: 5151 } });
    await waitFor('running', async () => (await tiRow(held!.tiId)).state === 'running');

    const poison = { tiId: held.tiId, tryNumber: 1, attemptToken: 'not-a-uuid' } as AttemptRef;
    const bad = agentProcess({ agentId: 'hb-bad', pool: 'nothing', keepaliveHeld: () => [poison] });
    const err = await bad.ended;
    expect(err?.code).toBe(Code.InvalidArgument);
    // A token is never echoed, even a malformed one: its fingerprint only.
    expect(err?.rawMessage).toMatch(
      /^keepalive\.held\[0\]\.attempt_token: must be a UUID \(the token of the Assign\), got \{"fingerprint":"sha256:[0-9a-f]{12}","length":10\}$/,
    );

    // The good agent's heartbeats keep landing, flush after flush.
    const since = new Date();
    await waitFor(
      'a heartbeat after the bad keepalive',
      async () => ((await tiRow(held!.tiId)).heartbeat_at?.getTime() ?? 0) > since.getTime() + 500,
      5000,
    );
    // Refused, counted and logged in one line, without a stack.
    const metrics = await scrapeMetrics(f.server.metricsUrl);
    expect(metrics.get('leoflow_agent_messages_invalid_total{report="keepalive"}')).toBe(1);
    const line = f.server.logs.find((l) => String(l.msg).startsWith('agent message refused: keepalive.held[0]'));
    expect(line).toMatchObject({ field: 'keepalive.held[0].attempt_token', report: 'keepalive' });
    expect(JSON.stringify(line)).not.toContain('"stack"');
    good.send({ case: 'finished', value: { attempt: held, outcome: AttemptOutcome.SUCCESS, exitCode: 0 } });
    expect((await good.next('finishedAck')).applied).toBe(true);
    await good.close();
  });

  it("a Started and a Finished with a token that is not a UUID, in the same batch as another agent's, are refused to their sender; the other agent's are written", async () => {
    const good = agentProcess({ agentId: 'pair-good', pool: 'pair', slots: 2 });
    await good.next('welcome');
    const runId = (await api().workflow.triggerRun({ dagId: 'pair' })).run!.runId;
    const a1 = (await good.next('assign')).attempt!;
    const a2 = (await good.next('assign')).attempt!;
    const tasks = new Map((await api().workflow.getRun({ runId })).taskInstances.map((t) => [t.tiId, t.taskId]));
    const [slowpoke, work] = tasks.get(a1.tiId) === 'slowpoke' ? [a1, a2] : [a2, a1];
    const badStarter = agentProcess({ agentId: 'pair-bad-1', pool: 'nothing' });
    const badFinisher = agentProcess({ agentId: 'pair-bad-2', pool: 'nothing' });
    await badStarter.next('welcome');
    await badFinisher.next('welcome');
    const poison = { tiId: work.tiId, tryNumber: 1, attemptToken: 'not-a-uuid' } as AttemptRef;

    // While the slow task's start is being written, the good and the bad Started arrive: they
    // wait for the next batch, together.
    good.send({ case: 'started', value: { attempt: slowpoke, pid: 1 } });
    await new Promise((r) => setTimeout(r, 300));
    badStarter.send({ case: 'started', value: { attempt: poison, pid: 666 } });
    good.send({ case: 'started', value: { attempt: work, pid: 2 } });
    const startErr = await badStarter.ended;
    expect(startErr?.code).toBe(Code.InvalidArgument);
    expect(startErr?.rawMessage).toContain('started.attempt.attempt_token: must be a UUID');
    await waitFor(
      'both started',
      async () => (await tiRow(slowpoke.tiId)).state === 'running' && (await tiRow(work.tiId)).state === 'running',
      10_000,
    );

    // The same for the ends.
    good.send({ case: 'finished', value: { attempt: slowpoke, outcome: AttemptOutcome.SUCCESS, exitCode: 0 } });
    await new Promise((r) => setTimeout(r, 300));
    badFinisher.send({ case: 'finished', value: { attempt: poison, outcome: AttemptOutcome.SUCCESS, exitCode: 0 } });
    good.send({ case: 'finished', value: { attempt: work, outcome: AttemptOutcome.SUCCESS, exitCode: 0 } });
    const endErr = await badFinisher.ended;
    expect(endErr?.code).toBe(Code.InvalidArgument);
    expect(endErr?.rawMessage).toContain('finished.attempt.attempt_token: must be a UUID');
    const acks = [await good.next('finishedAck'), await good.next('finishedAck')];
    expect(acks.map((a) => a.applied)).toEqual([true, true]);
    await waitFor('run success', async () => (await api().workflow.getRun({ runId })).run!.state === 3);
    // The good agent's stream was never closed for someone else's report.
    const still = await Promise.race([
      good.ended.then(() => 'ended'),
      new Promise((r) => setTimeout(() => r('open'), 500)),
    ]);
    expect(still).toBe('open');
    await good.close();
  });

  // A Finished whose outcome, exit code and signal disagree (an unknown outcome among them) is
  // refused alone, without ending the stream: agent-protocol-conformance.test.ts.
  it('refuses other broken reports by name: a ti id that is not a number, a try number below 1', async () => {
    const cases: [Msg, string][] = [
      [
        { case: 'started', value: { attempt: { tiId: '-5', tryNumber: 1, attemptToken: randomUUID() }, pid: 1 } },
        'started.attempt.ti_id: must be a positive 64-bit integer, got "-5"',
      ],
      [
        { case: 'log', value: { attempt: { tiId: '5', tryNumber: 0, attemptToken: randomUUID() }, entries: [] } },
        'log.attempt.try_number: must be at least 1, got 0',
      ],
    ];
    for (const [msg, message] of cases) {
      const a = agentProcess({ agentId: 'broken', pool: 'nothing' });
      await a.next('welcome');
      a.send(msg);
      const err = await a.ended;
      expect(err?.code).toBe(Code.InvalidArgument);
      expect(err?.rawMessage).toBe(message);
      await disconnected('broken');
    }
  });
});

describe('a duplicate agent id', () => {
  it('is refused ALREADY_EXISTS while the live agent keeps its labels, slots, connection and work; the same process reconnecting takes its stream over', async () => {
    const live = agentProcess({ agentId: 'dup-1', pool: 'dup', slots: 2 });
    await live.next('welcome');
    const run1 = (await api().workflow.triggerRun({ dagId: 'dup' })).run!.runId;
    const held = (await live.next('assign')).attempt!;
    live.send({ case: 'started', value: { attempt: held, pid: 7 } });

    const impostor = agentProcess({ agentId: 'dup-1', pool: 'elsewhere', slots: 9 });
    const err = await impostor.ended;
    expect(err?.code).toBe(Code.AlreadyExists);
    expect(err?.rawMessage).toContain('agent_id "dup-1" is held by another process on a live stream');

    const listed = (await api().cluster.listAgents({})).agents.find((a) => a.agentId === 'dup-1')!;
    expect(listed).toMatchObject({ connected: true, slots: 2, labels: { pool: 'dup' } });
    // Its Started is written in a batch of its own (not before the refusal, on a busy machine).
    await waitFor("the live agent's attempt running", async () => (await tiRow(held.tiId)).state === 'running', 10_000);
    expect(await tiRow(held.tiId)).toMatchObject({ state: 'running', delivered_to: live.incarnationId });
    // It still gets work.
    const run2 = (await api().workflow.triggerRun({ dagId: 'dup' })).run!.runId;
    const second = (await live.next('assign')).attempt!;
    expect(second.tiId).not.toBe(held.tiId);

    // The same process, its old stream half-dead, reconnects: it takes over, the old stream ends.
    const again = agentProcess({
      agentId: 'dup-1',
      pool: 'dup',
      slots: 2,
      incarnationId: live.incarnationId,
      held: [held, second],
      keepaliveHeld: () => [held, second],
    });
    const welcome = await again.next('welcome');
    expect(welcome.resumed.map((r) => r.attemptToken).sort()).toEqual([held.attemptToken, second.attemptToken].sort());
    const oldEnd = await live.ended;
    expect(oldEnd?.code).toBe(Code.Aborted);
    expect(oldEnd?.rawMessage).toContain('replaced by a newer stream of the same agent process');
    for (const a of [held, second])
      again.send({ case: 'finished', value: { attempt: a, outcome: AttemptOutcome.SUCCESS, exitCode: 0 } });
    expect([(await again.next('finishedAck')).applied, (await again.next('finishedAck')).applied]).toEqual([
      true,
      true,
    ]);
    for (const runId of [run1, run2])
      await waitFor('run success', async () => (await api().workflow.getRun({ runId })).run!.state === 3);
    expect((await api().cluster.listAgents({})).agents.find((a) => a.agentId === 'dup-1')).toMatchObject({
      connected: true,
      slots: 2,
    });
    await again.close();
  });
});
