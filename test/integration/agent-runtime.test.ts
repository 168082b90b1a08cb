/**
 * The agent runtime (grpc-js client) against a scripted AgentService served by connect-node:
 * assignments, logs, timeouts, cancels, reconnects, resume/supersede, deaf streams, refusal and
 * graceful stops; and the real `leoflow agent` command's wiring and exit codes.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { durationFromMs } from '@bufbuild/protobuf/wkt';
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { AgentFatalError, runAgent, type AgentHandle, type RunAgentOptions } from '../../src/agent/index.js';
import { AttemptOutcome, type Finished } from '../../src/gen/leoflow/v1/agent_pb.js';
import { FakeAgentService, type FakeStream } from '../helpers/fake-agent-service.js';
import { agentJobs, type AgentJob } from '../helpers/agent-jobs.js';

const logger = pino({ level: process.env.AGENT_TEST_LOG ?? 'silent' });
const fakes: FakeAgentService[] = [];
const agents: AgentHandle[] = [];
const children = new Set<ChildProcess>();
const stateDirs: string[] = [];

afterEach(async () => {
  for (const a of agents.splice(0)) {
    a.kill();
    await a.done.catch(() => {});
  }
  for (const c of children) c.kill('SIGKILL');
  children.clear();
  for (const d of stateDirs.splice(0)) rmSync(d, { recursive: true, force: true });
  await Promise.all(fakes.splice(0).map((f) => f.close()));
});

async function fake(opts: ConstructorParameters<typeof FakeAgentService>[0] = {}): Promise<FakeAgentService> {
  const f = await new FakeAgentService(opts).start();
  fakes.push(f);
  return f;
}

function agent(f: FakeAgentService, opts: Partial<RunAgentOptions> = {}): AgentHandle {
  const stateDir = mkdtempSync(join(tmpdir(), 'leoflow-agent-'));
  stateDirs.push(stateDir);
  const a = runAgent({
    stateDir,
    serverUrls: [f.url],
    agentId: 'test-agent',
    labels: { zone: 'a' },
    logger,
    killGraceMs: 500,
    shutdownGraceMs: 5000,
    logFlushMs: 20,
    welcomeTimeoutMs: 2000,
    backoff: { initialMs: 20, maxMs: 200 },
    ...opts,
  });
  agents.push(a);
  return a;
}

const job = agentJobs(100);
const tiOf = (j: AgentJob) => j.attempt.tiId;

function finishedOf(f: FakeAgentService, ti: string): Finished[] {
  return f
    .all()
    .filter((r) => r.msg.case === 'finished' && r.msg.value.attempt?.tiId === ti)
    .map((r) => r.msg.value as Finished);
}
const waitFinished = (f: FakeAgentService, ti: string, ms = 5000) =>
  f.waitFor(`Finished of ${ti}`, () => finishedOf(f, ti)[0], ms);
const waitStarted = (f: FakeAgentService, ti: string) =>
  f.waitFor(
    `Started of ${ti}`,
    () =>
      f.all().find((r) => r.msg.case === 'started' && r.msg.value.attempt?.tiId === ti)?.msg.value as
        { pid: number } | undefined,
  );
/** A `sleep 30` job assigned on stream `s`, once the agent reported it started (with its pid). */
async function assignedSleep(f: FakeAgentService, s: { assign(j: AgentJob): void }) {
  const j = job(['sleep', '30']);
  s.assign(j);
  const { pid } = await waitStarted(f, tiOf(j));
  return { j, pid };
}
const connected = (f: FakeAgentService, n = 1) =>
  f.waitFor(`stream ${n}`, () => f.streams.length >= n && f.streams[n - 1]!.received.length > 0 && f.streams[n - 1]);

/** The shim reports the task's end just before it kills its group, itself included, and its parent
 *  (the spawn helper) reaps it a moment later: a loaded machine can still see it between the two. */
const gone = (f: { waitFor: (what: string, fn: () => boolean, ms?: number) => Promise<unknown> }, pid: number) =>
  f.waitFor(`process ${pid} gone`, () => !alive(pid), 5000);

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

describe('agent runtime', () => {
  it('says Hello, keeps alive, runs an assignment and reports Started, Log (ordered seq) and Finished', async () => {
    const f = await fake();
    const a = agent(f, { capabilities: ['sh'], slots: 2 });
    const s = await f.waitFor('a stream', () => f.streams[0]);
    // The protocol features it implements are announced after the operator's capabilities.
    expect(s.hello).toMatchObject({
      protocolVersion: 2,
      agentId: 'test-agent',
      labels: { zone: 'a' },
      capabilities: ['sh', 'leoflow.secret-env'],
      slots: 2,
      held: [],
      onlyTiId: '0',
    });
    await f.waitFor('a keepalive', () => s.of('keepalive').length > 0);
    expect(a.connected).toBe(true);

    const j = job([
      'sh',
      '-c',
      'echo one; echo two >&2; for i in $(seq 1 200); do echo line $i; done; sleep 0.3; exit 3',
    ]);
    s.assign(j);
    const fin = await waitFinished(f, tiOf(j));
    expect(fin).toMatchObject({ outcome: AttemptOutcome.FAILED, exitCode: 3, error: 'exit code 3' });
    await f.waitFor('ack', () => a.held === 0);

    const kinds = s.received.filter((r) => r.msg.case !== 'keepalive').map((r) => r.msg.case);
    expect(kinds[0]).toBe('started');
    expect(kinds.at(-1)).toBe('finished');
    const entries = s.of('log').flatMap((l) => l.entries);
    expect(entries.map((e) => e.seq)).toEqual(entries.map((_, i) => i + 1)); // 1..n, in order, once each
    const lines = f.lines(tiOf(j));
    expect(lines.filter((e) => e.stream === 'stdout').map((e) => e.line)).toEqual([
      'one',
      ...Array.from({ length: 200 }, (_, i) => `line ${i + 1}`),
    ]);
    expect(lines.filter((e) => e.stream === 'stderr').map((e) => e.line)).toEqual(['two']);
    expect(lines[0]!.stream).toBe('system');
    // held in keepalives while running or unacknowledged, then not
    expect(s.of('keepalive').some((k) => k.held.some((h) => h.tiId === tiOf(j)))).toBe(true);
    await f.waitFor('an empty keepalive', () => s.of('keepalive').at(-1)!.held.length === 0 && true);
  });

  it('enforces Assign.timeout: SIGTERM, then TIMED_OUT', async () => {
    const f = await fake();
    agent(f);
    const s = await connected(f);
    const j = job(['sleep', '10'], { timeout: durationFromMs(300) });
    s.assign(j);
    const fin = await waitFinished(f, tiOf(j));
    expect(fin).toMatchObject({
      outcome: AttemptOutcome.TIMED_OUT,
      signal: 'SIGTERM',
      error: 'timed out after 300 ms',
    });
    expect(fin.exitCode).toBeUndefined();
  });

  it('Cancel stops the process group and finishes CANCELLED; spawn failures finish SPAWN_FAILED', async () => {
    const f = await fake();
    agent(f);
    const s = await connected(f);
    const { j, pid } = await assignedSleep(f, s);
    s.send({ case: 'cancel', value: { attempt: j.attempt, reason: 'cancelled by user' } });
    expect(await waitFinished(f, tiOf(j))).toMatchObject({
      outcome: AttemptOutcome.CANCELLED,
      error: 'cancelled by user',
      signal: 'SIGTERM',
    });
    await gone(f, pid);

    const bad = job(['/no/such/program']);
    s.assign(bad);
    const fin = await waitFinished(f, tiOf(bad));
    expect(fin.outcome).toBe(AttemptOutcome.SPAWN_FAILED);
    expect(fin.error).toMatch(/ENOENT/);
  });

  it('reconnects when the stream drops mid-attempt, lists the attempt in Hello.held, and delivers every line and the Finished', async () => {
    const f = await fake();
    const a = agent(f);
    const s1 = await connected(f);
    const j = job(['sh', '-c', 'echo before; sleep 0.8; echo after']);
    s1.assign(j);
    await f.waitFor('first line', () => f.logs.get(`${tiOf(j)}/1`)?.size);
    s1.close();
    const s2 = await f.waitFor('stream 2', () => f.streams[1]);
    expect(s2.hello.held.map((h) => h.tiId)).toEqual([tiOf(j)]);
    await waitFinished(f, tiOf(j), 5000);
    await f.waitFor('ack', () => a.held === 0);
    expect(finishedOf(f, tiOf(j))).toHaveLength(1);
    expect(
      f
        .lines(tiOf(j))
        .filter((e) => e.stream === 'stdout')
        .map((e) => e.line),
    ).toEqual(['before', 'after']);
  });

  it('keeps Log lines until a LogAck covers them: lines only keepalive-acked are sent again on the next stream', async () => {
    const f = await fake({ keepaliveIntervalMs: 100 });
    f.ackLogs = false;
    const a = agent(f);
    const s1 = await connected(f);
    const j = job(['sh', '-c', 'echo before; sleep 3; echo after']);
    s1.assign(j);
    await f.waitFor('first line', () => f.logs.get(`${tiOf(j)}/1`)?.size);
    // Several KeepaliveAcks pass after the line: they do not confirm it (only LogAck does).
    const acked = s1.received.filter((m) => m.msg.case === 'keepalive').length;
    await f.waitFor(
      'two more keepalives',
      () => s1.received.filter((m) => m.msg.case === 'keepalive').length >= acked + 2,
    );
    f.ackLogs = true;
    s1.close();
    const s2 = await f.waitFor('stream 2', () => f.streams[1]);
    await f.waitFor('the line sent again', () =>
      s2.received.some((m) => m.msg.case === 'log' && m.msg.value.entries.some((e) => e.line === 'before')),
    );
    await waitFinished(f, tiOf(j), 5000);
    await f.waitFor('ack', () => a.held === 0);
  });

  it('after a reconnect with Welcome.resumed, resends a Finished that was never acknowledged', async () => {
    const f = await fake();
    const a = agent(f);
    const s1 = await connected(f);
    f.ackFinished = false;
    const j = job(['sh', '-c', 'echo done']);
    s1.assign(j);
    await waitFinished(f, tiOf(j));
    await new Promise((r) => setTimeout(r, 100));
    expect(a.held).toBe(1); // kept until FinishedAck
    f.ackFinished = true;
    s1.close();
    const s2 = await f.waitFor('stream 2', () => f.streams[1]);
    expect(s2.hello.held.map((h) => h.tiId)).toEqual([tiOf(j)]);
    await f.waitFor('Finished on stream 2', () => s2.of('finished').length === 1);
    await f.waitFor('forgotten after ack', () => a.held === 0);
    expect(s2.of('finished')[0]).toMatchObject({ outcome: AttemptOutcome.SUCCESS, exitCode: 0 });
    expect(f.lines(tiOf(j)).map((e) => e.line)).toContain('done');
  });

  it('Welcome.superseded stops the process and reports nothing more about it', async () => {
    const f = await fake();
    const a = agent(f);
    const s1 = await connected(f);
    const { j, pid } = await assignedSleep(f, s1);
    f.isSuperseded = (ref) => ref.tiId === tiOf(j);
    s1.close();
    const s2 = await f.waitFor('stream 2', () => f.streams[1]);
    expect(s2.hello.held.map((h) => h.tiId)).toEqual([tiOf(j)]);
    await f.waitFor('process stopped', () => !alive(pid), 3000);
    expect(a.held).toBe(0);
    await f.waitFor('a keepalive on stream 2', () => s2.of('keepalive').length > 0);
    await new Promise((r) => setTimeout(r, 200));
    expect(s2.received.filter((r) => r.msg.case !== 'keepalive')).toEqual([]);
    expect(s2.of('keepalive').every((k) => k.held.length === 0)).toBe(true);
  });

  it('a deaf stream (no KeepaliveAck) is cancelled and replaced; running work is kept', async () => {
    const f = await fake({ keepaliveIntervalMs: 100 });
    const a = agent(f);
    const s1 = await connected(f);
    const { j } = await assignedSleep(f, s1);
    const deafAt = Date.now();
    s1.deaf = true;
    const s2 = await f.waitFor('stream 2', () => f.streams[1], 3000);
    const took = Date.now() - deafAt;
    expect(took).toBeGreaterThanOrEqual(250); // 3 intervals without an ack
    expect(took).toBeLessThan(1500);
    await f.waitFor('stream 1 cancelled by the agent', () => s1.peerEnded);
    expect(s2.hello.held.map((h) => h.tiId)).toEqual([tiOf(j)]);
    expect(a.held).toBe(1);
    expect(finishedOf(f, tiOf(j))).toEqual([]);
  });

  it('gives up on a stream that sends no Welcome, and reconnects', async () => {
    const f = await fake();
    f.sendWelcome = false;
    const a = agent(f, { welcomeTimeoutMs: 300 });
    const s1 = await f.waitFor('stream 1', () => f.streams[0]);
    f.sendWelcome = true;
    await f.waitFor('stream 2 welcomed', () => f.streams.length === 2 && a.connected, 3000);
    expect(s1.peerEnded).toBe(true);
    expect(s1.received).toEqual([]); // nothing but Hello before Welcome
  });

  it('sends HTTP/2 PINGs (grpc.keepalive_time_ms) besides the app-level Keepalive', async () => {
    const f = await fake();
    agent(f, { http2KeepaliveMs: 100 });
    await connected(f);
    await f.waitFor('an HTTP/2 ping', () => f.http2Pings > 0, 3000);
  });

  it('is refused at Hello with FAILED_PRECONDITION: rejects with the server message and does not retry', async () => {
    const f = await fake({ versions: [3] });
    const a = agent(f);
    const err = await a.done.then(
      () => null,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(AgentFatalError);
    expect((err as AgentFatalError).code).toBe(9);
    expect((err as Error).message).toBe(
      'control plane refused the agent: FAILED_PRECONDITION: protocol_version 2 is not supported; this control plane speaks 3',
    );
    await new Promise((r) => setTimeout(r, 300));
    expect(f.refused).toBe(1);
  });

  it('reconnects with backoff while the control plane is down', async () => {
    const f = await fake();
    const url = f.url;
    await f.close();
    const a = agent(f, { serverUrls: [url] });
    await new Promise((r) => setTimeout(r, 300));
    expect(a.connected).toBe(false);
    // Same port again: the agent finds it on its next try.
    const port = Number(new URL(url).port);
    const g = new FakeAgentService();
    fakes.push(g);
    await listenOn(g, port);
    await g.waitFor('reconnected', () => a.connected && g.streams.length > 0, 3000);
  });

  it('stop(finish) lets the running attempt end and waits for its FinishedAck', async () => {
    const f = await fake();
    const a = agent(f);
    const s = await connected(f);
    const j = job(['sh', '-c', 'sleep 0.5; echo finished-normally']);
    s.assign(j);
    await waitStarted(f, tiOf(j));
    const exit = await a.stop('finish');
    expect(exit).toEqual({ reason: 'stopped', unacknowledged: 0 });
    expect(finishedOf(f, tiOf(j))[0]).toMatchObject({ outcome: AttemptOutcome.SUCCESS, exitCode: 0 });
    expect(f.lines(tiOf(j)).map((e) => e.line)).toContain('finished-normally');
    await f.waitFor('stream ended by the agent', () => s.peerEnded);
  });

  it('stop(handback) stops the attempt at once and reports it FAILED so it is retried', async () => {
    const f = await fake();
    const a = agent(f);
    const s = await connected(f);
    const { j, pid } = await assignedSleep(f, s);
    const t0 = Date.now();
    const exit = await a.stop('handback');
    expect(Date.now() - t0).toBeLessThan(2000);
    expect(exit).toEqual({ reason: 'stopped', unacknowledged: 0 });
    expect(finishedOf(f, tiOf(j))[0]).toMatchObject({
      outcome: AttemptOutcome.FAILED,
      error: 'agent test-agent shut down before the task ended',
    });
    await gone(f, pid);
  });

  it('--once: takes the one attempt, exits once it is acknowledged; Drain with nothing held also ends it', async () => {
    const f = await fake();
    f.onConnect = (s) => {
      if (s.hello.onlyTiId === '42')
        s.assign({ ...job(['true']), attempt: { tiId: '42', tryNumber: 2, attemptToken: 'x' } });
      else s.send({ case: 'drain', value: { reason: 'nothing to run' } });
    };
    const a = agent(f, { onlyTiId: '42' });
    await expect(a.done).resolves.toEqual({ reason: 'completed', unacknowledged: 0 });
    expect(f.finished.get('42/2')?.[0]?.outcome).toBe(AttemptOutcome.SUCCESS);

    const b = agent(f, { onlyTiId: '43' });
    await expect(b.done).resolves.toEqual({ reason: 'completed', unacknowledged: 0 });
  });
});

async function listenOn(f: FakeAgentService, port: number): Promise<void> {
  // start() listens on port 0; reuse its wiring on a fixed port by retrying until free.
  for (let i = 0; ; i++) {
    try {
      await f.start(port);
      return;
    } catch (err) {
      if (i > 20) throw err;
      await new Promise((r) => setTimeout(r, 50));
    }
  }
}

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const BIN = fileURLToPath(new URL('../../bin/leoflow.js', import.meta.url));

function cli(
  args: string[],
  env: Record<string, string> = {},
): { child: ChildProcess; out: () => string; err: () => string; exited: Promise<number | null> } {
  if (!existsSync(new URL('../../dist/agent/agent-runtime.js', import.meta.url)))
    throw new Error('dist/ is not built: run `npm run build` first');
  const child = spawn(process.execPath, [BIN, ...args], {
    cwd: ROOT,
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.add(child);
  let out = '';
  let err = '';
  child.stdout!.on('data', (c: Buffer) => (out += c));
  child.stderr!.on('data', (c: Buffer) => (err += c));
  const exited = new Promise<number | null>((resolve) =>
    child.on('exit', (code) => (children.delete(child), resolve(code))),
  );
  // bin/leoflow.js warns when src/ is newer than the build (others may be editing): not ours to check.
  const stderr = () => err.replace(/^leoflow: warning: src\/ changed since the last build.*\n/m, '');
  return { child, out: () => out, err: stderr, exited };
}

async function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let t: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>(
    (_, reject) => (t = setTimeout(() => reject(new Error(`${what}: not within ${ms} ms`)), ms)),
  );
  try {
    return await Promise.race([p, timeout]);
  } finally {
    clearTimeout(t);
  }
}

describe('leoflow agent (the real process)', () => {
  it('runs a --once attempt and exits 0; rejects bad flags with exit 2; a refusal exits 1; SIGTERM finishes the task and exits 0', async () => {
    const f = await fake();
    f.onConnect = (s: FakeStream) => {
      if (s.hello.onlyTiId === '42')
        s.assign({ ...job(['sh', '-c', 'echo from-cli']), attempt: { tiId: '42', tryNumber: 1, attemptToken: 'cli' } });
    };
    const once = cli(['--server', f.url, 'agent', '--id', 'cli-once', '--once', '--ti', '42', '--log-format', 'json']);
    expect(await within(once.exited, 15_000, 'agent --once')).toBe(0);
    expect(f.finished.get('42/1')?.[0]).toMatchObject({ outcome: AttemptOutcome.SUCCESS, exitCode: 0 });
    expect(f.lines('42').map((e) => e.line)).toContain('from-cli');
    const records = once
      .out()
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(records.find((r) => r.msg === 'attempt finished')).toMatchObject({
      agentId: 'cli-once',
      tiId: '42',
      try: 1,
      outcome: 'success',
    });

    const bad = cli(['agent', '--labels', 'gpu', '--slots', '0', '--once']);
    expect(await within(bad.exited, 10_000, 'bad flags')).toBe(2);
    expect(bad.err()).toBe(
      'leoflow agent: --labels: expected k=v pairs separated by commas, got "gpu"\n' +
        'leoflow agent: --slots: must be a positive integer, got "0"\n' +
        'leoflow agent: --once: requires --ti ID (the task instance to run)\n',
    );

    const refusing = await fake({ versions: [3] });
    const refused = cli(['--server', refusing.url, 'agent', '--log-format', 'json']);
    expect(await within(refused.exited, 10_000, 'refused agent')).toBe(1);
    expect(refused.err()).toContain(
      'leoflow agent: control plane refused the agent: FAILED_PRECONDITION: protocol_version 2 is not supported',
    );
    expect(refusing.refused).toBe(1);

    const long = cli(['--server', f.url, 'agent', '--id', 'cli-long', '--log-format', 'json']);
    const s = await f.waitFor(
      'cli-long connected',
      () => f.streams.find((x) => x.hello.agentId === 'cli-long' && x.of('keepalive').length > 0),
      10_000,
    );
    const j = job(['sh', '-c', 'sleep 0.5; echo survived-sigterm']);
    s.assign(j);
    await waitStarted(f, tiOf(j));
    long.child.kill('SIGTERM');
    expect(await within(long.exited, 10_000, 'agent after SIGTERM')).toBe(0);
    expect(finishedOf(f, tiOf(j))[0]).toMatchObject({ outcome: AttemptOutcome.SUCCESS });
    expect(f.lines(tiOf(j)).map((e) => e.line)).toContain('survived-sigterm');
  });
});
