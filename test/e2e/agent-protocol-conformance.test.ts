import { randomUUID } from 'node:crypto';

import { Code, ConnectError } from '@connectrpc/connect';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createClients } from '../../src/cli/client.js';
import {
  AttemptOutcome,
  ProtocolVersion,
  type AttemptRef,
  type ConnectResponse,
} from '../../src/gen/leoflow/v1/agent_pb.js';
import { RunState, TaskState } from '../../src/gen/leoflow/v1/types_pb.js';
import { cli, scratchDir, startAgent, startServer, waitFor, type ServerProcess } from '../helpers/leoflow-process.js';
import { scrapeMetrics } from '../helpers/scrape-metrics.js';
import { scriptedAgent } from '../helpers/scripted-agent.js';
import { createTestDatabase, type TestDatabase } from '../helpers/test-database.js';
import { applyDag } from '../helpers/applied-dag.js';

/**
 * The agent protocol's contract (proto/leoflow/v1/agent.proto), rule by rule: each test is one
 * scripted sequence a stranger's agent could send, against the real server, checking what the
 * comments promise.
 */

let db: TestDatabase;
let server: ServerProcess;
let api: ReturnType<typeof createClients>;
const KEEPALIVE_MS = 300;

beforeAll(async () => {
  db = await createTestDatabase();
  const dir = scratchDir('leoflow-conformance-');
  server = await startServer({
    env: { DATABASE_URL: db.url },
    args: ['--heartbeat-interval', `${KEEPALIVE_MS}ms`, '--heartbeat-threshold', '20s', '--kill-grace', '7s'],
  });
  api = createClients(server.url);
  await applyDag(
    server.url,
    dir,
    'dag_id: conformance\ntasks:\n  - id: job\n    executor: agents\n    command: [echo, hi]\n    placement: { labels: { lane: conformance } }\n',
  );
});
afterAll(async () => {
  if (process.env.CONF_DEBUG)
    for (const l of server?.logs ?? [])
      if ((l.level as number) >= 40) console.log('server', JSON.stringify(l).slice(0, 400));
  await server?.stop();
  await db?.drop();
});

type Agent = ReturnType<typeof scriptedAgent> & { incarnationId: string };

/** A scripted agent of the conformance lane, welcomed; it keeps alive on its own, listing `held`. */
async function welcomed(
  agentId: string,
  opts: { slots?: number; incarnationId?: string; held?: AttemptRef[] } = {},
): Promise<Agent & { welcome: ConnectResponse }> {
  const a = scriptedAgent(server.url, { keepaliveMs: 150 });
  const incarnationId = opts.incarnationId ?? randomUUID();
  a.outbox.push({
    msg: {
      case: 'hello',
      value: {
        protocolVersion: ProtocolVersion.PROTOCOL_VERSION_2,
        agentId,
        labels: { lane: 'conformance' },
        slots: opts.slots ?? 1,
        incarnationId,
        held: opts.held ?? [],
      },
    },
  });
  const welcome = await a.inbox.next();
  expect(welcome.msg.case).toBe('welcome');
  return { ...a, incarnationId, welcome };
}

/** The next message of `kind`, skipping others (failing on one listed in `forbid`). */
type Msg = ConnectResponse['msg'];
type ValueOf<K> = Extract<Msg, { case: K }> extends { value: infer V } ? V : never;

async function until<K extends NonNullable<Msg['case']>>(
  a: Agent,
  kind: K,
  forbid: string[] = [],
  timeoutMs = 10_000,
): Promise<ValueOf<K>> {
  for (;;) {
    const m = await a.inbox.next(timeoutMs);
    if (process.env.CONF_DEBUG)
      console.log(
        'got',
        m.msg.case,
        JSON.stringify(m.msg.value, (_k, v) => (typeof v === 'bigint' ? String(v) : v)),
      );
    expect(forbid, `unexpected ${m.msg.case}`).not.toContain(m.msg.case);
    if (m.msg.case === kind) return m.msg.value as ValueOf<K>;
  }
}

/** Nothing of `kind` arrives within `ms`. */
async function none(a: Agent, kind: string, ms: number): Promise<void> {
  const end = Date.now() + ms;
  for (;;) {
    const left = end - Date.now();
    if (left <= 0) return;
    const m = await a.inbox.next(left).catch((err: unknown) => {
      if ((err as Error).message.startsWith('nothing received')) return null;
      throw err;
    });
    if (m === null) return;
    expect(m.msg.case, `no ${kind} expected`).not.toBe(kind);
  }
}

async function trigger(): Promise<string> {
  return (await api.workflow.triggerRun({ dagId: 'conformance' })).run!.runId;
}

async function ti(runId: string) {
  return (await api.workflow.getRun({ runId })).taskInstances[0]!;
}

async function end(a: Agent): Promise<void> {
  a.close();
  await a.done.catch(() => {});
}

async function stale(report: string): Promise<number> {
  const m = await scrapeMetrics(server.metricsUrl);
  return m.get(`leoflow_stale_reports_rejected_total{report="${report}"}`) ?? 0;
}

/** An attempt assigned to `a`, started and listed in its keepalives. */
async function started(a: Agent): Promise<{ runId: string; attempt: AttemptRef }> {
  const runId = await trigger();
  const attempt = (await until(a, 'assign')).attempt!;
  a.outbox.push({ msg: { case: 'started', value: { attempt, pid: 4242 } } });
  a.held.set(attempt.tiId, attempt);
  return { runId, attempt };
}

describe('agent protocol conformance', () => {
  it('values: Welcome gives the keepalive interval and the heartbeat threshold, Assign the control plane kill grace', async () => {
    const a = await welcomed('conf-values');
    const w = a.welcome.msg.case === 'welcome' ? a.welcome.msg.value : null;
    expect(Number(w!.keepaliveInterval!.nanos) / 1e6 + Number(w!.keepaliveInterval!.seconds) * 1000).toBe(KEEPALIVE_MS);
    expect(Number(w!.heartbeatThreshold!.seconds)).toBe(20);
    const runId = await trigger();
    const assign = await until(a, 'assign');
    expect(Number(assign.killGrace!.seconds)).toBe(7);
    a.outbox.push({
      msg: { case: 'finished', value: { attempt: assign.attempt, outcome: AttemptOutcome.SUCCESS, exitCode: 0 } },
    });
    expect((await until(a, 'finishedAck')).applied).toBe(true);
    await waitFor('run success', async () => (await api.workflow.getRun({ runId })).run!.state === RunState.SUCCESS);
    await end(a);
  });

  it('drain and undrain: each is told on the stream; after undrain, Assign comes again', async () => {
    const a = await welcomed('conf-drain');
    await api.cluster.drainAgent({ agentId: 'conf-drain' });
    expect(await until(a, 'drain')).toMatchObject({ undrain: false });
    const runId = await trigger();
    await waitFor('run waits for an agent that is not draining', async () =>
      (await ti(runId)).pendingReason.startsWith('AGENT_DRAINING'),
    );
    await api.cluster.drainAgent({ agentId: 'conf-drain', undrain: true });
    expect(await until(a, 'drain', ['assign'])).toMatchObject({ undrain: true });
    const assign = await until(a, 'assign');
    a.outbox.push({
      msg: { case: 'finished', value: { attempt: assign.attempt, outcome: AttemptOutcome.SUCCESS, exitCode: 0 } },
    });
    expect((await until(a, 'finishedAck')).applied).toBe(true);
    await end(a);
  });

  it('after Cancel: the final Log is stored and acked, keepalives get no second Cancel, Finished CANCELLED is applied', async () => {
    const a = await welcomed('conf-cancel');
    const { runId, attempt } = await started(a);
    const staleBefore = (await stale('keepalive')) + (await stale('log')) + (await stale('finished'));
    await api.workflow.cancelRun({ runId });
    expect((await until(a, 'cancel')).attempt!.attemptToken).toBe(attempt.attemptToken);
    a.outbox.push({
      msg: {
        case: 'log',
        value: { attempt, entries: [{ seq: 1, stream: 'stderr', line: 'got SIGTERM, cleaning up' }] },
      },
    });
    expect(await until(a, 'logAck', ['cancel'])).toMatchObject({ lastSeq: 1 });
    // Several keepalives list the stopping attempt: its heartbeat, not a zombie's claim.
    await none(a, 'cancel', 4 * KEEPALIVE_MS);
    a.outbox.push({
      msg: {
        case: 'finished',
        value: { attempt, outcome: AttemptOutcome.CANCELLED, signal: 'SIGTERM', error: 'cancelled' },
      },
    });
    expect((await until(a, 'finishedAck', ['cancel'])).applied).toBe(true);
    a.held.delete(attempt.tiId);
    expect(await ti(runId)).toMatchObject({ state: TaskState.CANCELLED });
    expect((await cli(server.url, ['logs', runId])).stdout).toContain('got SIGTERM, cleaning up');
    expect((await stale('keepalive')) + (await stale('log')) + (await stale('finished'))).toBe(staleBefore);
    await end(a);
  });

  it('FinishedAck.applied: true for the end recorded and for an identical resend, false for a contradictory one', async () => {
    const a = await welcomed('conf-applied');
    const { runId, attempt } = await started(a);
    const success = {
      msg: { case: 'finished' as const, value: { attempt, outcome: AttemptOutcome.SUCCESS, exitCode: 0 } },
    };
    a.outbox.push(success);
    expect((await until(a, 'finishedAck')).applied).toBe(true);
    a.outbox.push(success);
    expect((await until(a, 'finishedAck', ['cancel'])).applied).toBe(true);
    a.outbox.push({ msg: { case: 'finished', value: { attempt, outcome: AttemptOutcome.FAILED, exitCode: 3 } } });
    expect(await until(a, 'finishedAck', ['cancel'])).toMatchObject({ applied: false, refused: '' });
    expect(await ti(runId)).toMatchObject({ state: TaskState.SUCCESS, exitCode: 0 });
    a.held.delete(attempt.tiId);
    await end(a);
  });

  it('Log seq: resends are skipped (not stale), a gap stops the batch, LogAck gives the highest contiguous seq; seq 0 is INVALID_ARGUMENT', async () => {
    const a = await welcomed('conf-logs');
    const { runId, attempt } = await started(a);
    const staleBefore = await stale('log');
    const log = (...seqs: number[]) =>
      a.outbox.push({
        msg: {
          case: 'log',
          value: { attempt, entries: seqs.map((seq) => ({ seq, stream: 'stdout', line: `line ${seq}` })) },
        },
      });
    log(1, 2);
    expect((await until(a, 'logAck')).lastSeq).toBe(2);
    log(2, 3);
    expect((await until(a, 'logAck')).lastSeq).toBe(3);
    log(5, 6);
    expect((await until(a, 'logAck')).lastSeq).toBe(3);
    log(4, 5, 6);
    expect((await until(a, 'logAck')).lastSeq).toBe(6);
    a.outbox.push({ msg: { case: 'finished', value: { attempt, outcome: AttemptOutcome.SUCCESS, exitCode: 0 } } });
    expect((await until(a, 'finishedAck')).applied).toBe(true);
    a.held.delete(attempt.tiId);
    const out = (await cli(server.url, ['logs', runId])).stdout;
    expect(out.match(/line \d/g)).toEqual(['line 1', 'line 2', 'line 3', 'line 4', 'line 5', 'line 6']);
    expect(await stale('log')).toBe(staleBefore);
    // seq 0 breaks the rule: the stream ends, naming the field.
    a.outbox.push({ msg: { case: 'log', value: { attempt, entries: [{ seq: 0, stream: 'stdout', line: 'x' }] } } });
    const err = await until(a, 'welcome').then(
      () => null,
      (e: unknown) => ConnectError.from(e),
    );
    expect(err?.code).toBe(Code.InvalidArgument);
    expect(err?.rawMessage).toMatch(/log\.entries\[0\]\.seq: must be at least 1/);
    await end(a);
  });

  it('order: Finished without Started is allowed; Log after Finished, or for an attempt not given to this stream, is not stored and not acked', async () => {
    const a = await welcomed('conf-order');
    const runId = await trigger();
    const attempt = (await until(a, 'assign')).attempt!;
    a.outbox.push({
      msg: { case: 'finished', value: { attempt, outcome: AttemptOutcome.SPAWN_FAILED, error: 'spawn ENOENT' } },
    });
    expect((await until(a, 'finishedAck')).applied).toBe(true);
    a.outbox.push({
      msg: { case: 'log', value: { attempt, entries: [{ seq: 1, stream: 'stdout', line: 'after the end' }] } },
    });
    const stranger = { tiId: attempt.tiId, tryNumber: 1, attemptToken: randomUUID() };
    a.outbox.push({
      msg: { case: 'log', value: { attempt: stranger, entries: [{ seq: 1, stream: 'stdout', line: 'not mine' }] } },
    });
    await none(a, 'logAck', 3 * KEEPALIVE_MS);
    await waitFor('run failed', async () => (await api.workflow.getRun({ runId })).run!.state === RunState.FAILED);
    const out = (await cli(server.url, ['logs', runId])).stdout;
    expect(out).not.toContain('after the end');
    expect(out).not.toContain('not mine');
    await end(a);
  });

  it('Finished consistency: an unknown outcome or SUCCESS with a signal is refused alone; the attempt fails, the stream and its other attempts go on', async () => {
    const a = await welcomed('conf-finished', { slots: 3 });
    const runs: string[] = [];
    const attempts: AttemptRef[] = [];
    for (let i = 0; i < 3; i++) {
      const r = await started(a);
      runs.push(r.runId);
      attempts.push(r.attempt);
    }
    a.outbox.push({
      msg: { case: 'finished', value: { attempt: attempts[0], outcome: 99 as AttemptOutcome, exitCode: 0 } },
    });
    const ack0 = await until(a, 'finishedAck');
    expect(ack0).toMatchObject({ applied: false });
    expect(ack0.refused).toMatch(
      /^finished\.outcome: must be one of SUCCESS, FAILED, TIMED_OUT, CANCELLED, SPAWN_FAILED, got 99/,
    );
    a.outbox.push({
      msg: { case: 'finished', value: { attempt: attempts[1], outcome: AttemptOutcome.SUCCESS, signal: 'SIGKILL' } },
    });
    const ack1 = await until(a, 'finishedAck');
    expect(ack1).toMatchObject({ applied: false });
    expect(ack1.refused).toMatch(/^finished\.signal: must be empty for outcome SUCCESS/);
    // The third attempt, on the same stream, is unharmed.
    a.outbox.push({
      msg: {
        case: 'log',
        value: { attempt: attempts[2], entries: [{ seq: 1, stream: 'stdout', line: 'still here' }] },
      },
    });
    expect((await until(a, 'logAck')).lastSeq).toBe(1);
    a.outbox.push({
      msg: { case: 'finished', value: { attempt: attempts[2], outcome: AttemptOutcome.SUCCESS, exitCode: 0 } },
    });
    expect((await until(a, 'finishedAck')).applied).toBe(true);
    for (const r of attempts) a.held.delete(r.tiId);
    expect(await ti(runs[0]!)).toMatchObject({ state: TaskState.FAILED });
    expect((await ti(runs[0]!)).error).toMatch(/the agent's Finished was invalid: finished\.outcome/);
    expect(await ti(runs[1]!)).toMatchObject({ state: TaskState.FAILED });
    expect(await ti(runs[2]!)).toMatchObject({ state: TaskState.SUCCESS });
    await end(a);
  });

  it('Hello.held: a not-started attempt left out is sent again to the same process, and one left out by a new process is ended as lost', async () => {
    const incarnationId = randomUUID();
    const a = await welcomed('conf-held', { incarnationId });
    const runId = await trigger();
    const attempt = (await until(a, 'assign')).attempt!;
    await end(a);
    // The same process, reconnecting without it (it was never started): Assign again, the same token.
    const b = await welcomed('conf-held', { incarnationId });
    expect((await until(b, 'assign')).attempt!.attemptToken).toBe(attempt.attemptToken);
    b.outbox.push({ msg: { case: 'started', value: { attempt, pid: 1 } } });
    await waitFor('running', async () => (await ti(runId)).state === TaskState.RUNNING);
    await end(b);
    // A new process of the agent that does not hold it: lost, ended (no retries left: failed).
    const c = await welcomed('conf-held');
    await waitFor('attempt ended as lost', async () => (await ti(runId)).state === TaskState.FAILED);
    expect((await ti(runId)).error).toMatch(/^agent_restarted/);
    await none(c, 'assign', 2 * KEEPALIVE_MS);
    await end(c);
  });

  it('duplicate agent_id: another process is refused with ALREADY_EXISTS and the live stream is untouched; the same process takes over', async () => {
    const a = await welcomed('conf-dup');
    const intruder = scriptedAgent(server.url);
    intruder.outbox.push({
      msg: {
        case: 'hello',
        value: {
          protocolVersion: ProtocolVersion.PROTOCOL_VERSION_2,
          agentId: 'conf-dup',
          slots: 1,
          incarnationId: randomUUID(),
        },
      },
    });
    const err = await intruder.inbox.next().then(
      () => null,
      (e: unknown) => ConnectError.from(e),
    );
    intruder.close();
    expect(err?.code).toBe(Code.AlreadyExists);
    expect(err?.rawMessage).toMatch(/held by another process on a live stream/);
    // The first stream still works: it is given work.
    const runId = await trigger();
    const assign = await until(a, 'assign');
    a.outbox.push({
      msg: { case: 'finished', value: { attempt: assign.attempt, outcome: AttemptOutcome.SUCCESS, exitCode: 0 } },
    });
    expect((await until(a, 'finishedAck')).applied).toBe(true);
    await waitFor('run success', async () => (await api.workflow.getRun({ runId })).run!.state === RunState.SUCCESS);
    // The same process (same incarnation) on a new stream replaces the old one, which is ABORTED.
    const b = await welcomed('conf-dup', { incarnationId: a.incarnationId });
    const old = await until(a, 'welcome').then(
      () => null,
      (e: unknown) => ConnectError.from(e),
    );
    expect(old?.code).toBe(Code.Aborted);
    await end(a);
    await end(b);
  });

  // That the TS agent stops on these instead of retrying: agent-runtime.test.ts ("is refused at
  // Hello with FAILED_PRECONDITION …").
  it('status codes: a refused Hello ends with FAILED_PRECONDITION or INVALID_ARGUMENT naming the field', async () => {
    const version = scriptedAgent(server.url);
    version.outbox.push({
      msg: {
        case: 'hello',
        value: { protocolVersion: 7 as ProtocolVersion, agentId: 'conf-codes', slots: 1, incarnationId: randomUUID() },
      },
    });
    expect(
      await version.inbox.next().then(
        () => null,
        (e: unknown) => ConnectError.from(e).code,
      ),
    ).toBe(Code.FailedPrecondition);
    version.close();
    const bad = scriptedAgent(server.url);
    bad.outbox.push({
      msg: {
        case: 'hello',
        value: {
          protocolVersion: ProtocolVersion.PROTOCOL_VERSION_2,
          agentId: 'conf codes',
          slots: 1,
          incarnationId: randomUUID(),
        },
      },
    });
    const err = await bad.inbox.next().then(
      () => null,
      (e: unknown) => ConnectError.from(e),
    );
    bad.close();
    expect(err?.code).toBe(Code.InvalidArgument);
    expect(err?.rawMessage).toMatch(/^hello\.agent_id: must be/);
  });

  it('non-UTF-8 output: the TS agent decodes it as UTF-8 with U+FFFD for each bad sequence', async () => {
    const dir = scratchDir('leoflow-conformance-utf8-');
    await applyDag(
      server.url,
      dir,
      'dag_id: bytes\ntasks:\n  - id: job\n    executor: agents\n    command: [printf, "ok \\\\377\\\\376 \\\\303\\\\251\\\\r\\\\n"]\n    placement: { labels: { lane: bytes } }\n',
    );
    const agent = startAgent(server.url, ['--id', 'conf-bytes', '--labels', 'lane=bytes']);
    const runId = (await api.workflow.triggerRun({ dagId: 'bytes' })).run!.runId;
    await waitFor(
      'run success',
      async () => (await api.workflow.getRun({ runId })).run!.state === RunState.SUCCESS,
      20_000,
    );
    const out = (await cli(server.url, ['logs', runId])).stdout;
    expect(out).toContain('ok \uFFFD\uFFFD é\n');
    await agent.stop();
  });
});
