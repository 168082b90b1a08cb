/**
 * The agent runtime against several scripted control-plane replicas: a Reconnect sends it to the
 * next address at once with its attempts (running, and finished but not acknowledged); an address
 * that is down costs one try; and the reconnect backoff honours Welcome.max_reconnect_backoff, so
 * an agent is back soon after its replica is.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { runAgent, type AgentHandle, type RunAgentOptions } from '../../src/agent/index.js';
import { AttemptOutcome } from '../../src/gen/leoflow/v1/agent_pb.js';
import { FakeAgentService, type FakeOptions } from '../helpers/fake-agent-service.js';
import { cli } from '../helpers/leoflow-process.js';
import { agentJobs } from '../helpers/agent-jobs.js';

const logger = pino({ level: process.env.AGENT_TEST_LOG ?? 'silent' });
const fakes: FakeAgentService[] = [];
const agents: AgentHandle[] = [];
const stateDirs: string[] = [];

afterEach(async () => {
  for (const a of agents.splice(0)) {
    a.kill();
    await a.done.catch(() => {});
  }
  await Promise.all(fakes.splice(0).map((f) => f.close()));
  for (const d of stateDirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function stateDir(): string {
  const d = mkdtempSync(join(tmpdir(), 'leoflow-failover-agent-'));
  stateDirs.push(d);
  return d;
}

async function fake(opts: FakeOptions = {}, port = 0): Promise<FakeAgentService> {
  // Keepalives slow enough that a loaded machine does not make a stream look deaf.
  const f = new FakeAgentService({ keepaliveIntervalMs: 1000, ...opts });
  fakes.push(f);
  // A fixed port may still be held by the replica that just closed on it: retry a little.
  for (let i = 0; ; i++) {
    try {
      return await f.start(port);
    } catch (err) {
      if (i > 20) throw err;
      await new Promise((r) => setTimeout(r, 50));
    }
  }
}

/** A URL where nothing listens (a replica that is down). */
async function deadUrl(): Promise<string> {
  const f = await new FakeAgentService().start();
  await f.close();
  return f.url;
}

function agent(serverUrls: string[], opts: Partial<RunAgentOptions> = {}): AgentHandle {
  const a = runAgent({
    stateDir: stateDir(),
    serverUrls,
    agentId: 'failover-agent',
    logger,
    killGraceMs: 500,
    shutdownGraceMs: 5000,
    logFlushMs: 20,
    welcomeTimeoutMs: 2000,
    // Any backoff the agent waits is close to its ceiling, so one taken where none should be shows.
    backoff: { initialMs: 1000, maxMs: 5000, random: () => 0.99 },
    ...opts,
  });
  agents.push(a);
  return a;
}

const job = agentJobs(500);

describe('agent failover between control-plane addresses', () => {
  it('Reconnect: ends the stream and connects at once to the next address, keeping its running attempt and sending again an unacknowledged Finished', async () => {
    const a1 = await fake({ replicaId: 'a' });
    const b1 = await fake({ replicaId: 'b' });
    const a = agent([a1.url, b1.url]);
    const s1 = await a1.waitFor('stream on a', () => a1.streams[0]);
    await a1.waitFor('welcomed', () => a.connected);
    a1.ackFinished = false;
    const done = job(['sh', '-c', 'echo done']);
    const running = job(['sh', '-c', 'echo before; sleep 0.8; echo after']);
    s1.assign(done);
    s1.assign(running);
    await a1.waitFor('Finished of the short one on a', () => s1.of('finished').length === 1);
    await a1.waitFor('Started of the long one on a', () =>
      s1.of('started').some((m) => m.attempt?.tiId === running.attempt.tiId),
    );

    const told = Date.now();
    s1.send({ case: 'reconnect', value: { reason: 'replica a is shutting down' } });
    const s2 = await b1.waitFor('stream on b', () => b1.streams[0], 3000);
    const movedMs = Date.now() - told;
    // At once: no backoff (which would be about a second here).
    expect(movedMs).toBeLessThan(500);
    await a1.waitFor('the agent ended its stream on a', () => s1.peerEnded);
    expect(s2.hello.held.map((h) => h.tiId).sort()).toEqual([done.attempt.tiId, running.attempt.tiId].sort());

    // The Finished a never acknowledged is sent again to b; the running attempt ends there.
    await b1.waitFor('both Finished on b', () => s2.of('finished').length === 2, 5000);
    expect(
      s2
        .of('finished')
        .map((f) => [f.attempt?.tiId, f.outcome])
        .sort(),
    ).toEqual(
      [
        [done.attempt.tiId, AttemptOutcome.SUCCESS],
        [running.attempt.tiId, AttemptOutcome.SUCCESS],
      ].sort(),
    );
    await b1.waitFor('forgotten after ack', () => a.held === 0);
    // Every output line is stored once, on a or (sent again) on b.
    const key = `${running.attempt.tiId}/1`;
    const bySeq = new Map([...(a1.logs.get(key) ?? new Map()), ...(b1.logs.get(key) ?? new Map())]);
    const stdout = [...bySeq.entries()]
      .sort(([x], [y]) => x - y)
      .map(([, e]) => e)
      .filter((e) => e.stream === 'stdout');
    expect(stdout.map((e) => e.line)).toEqual(['before', 'after']);
    expect(a1.streams).toHaveLength(1);
  });

  it('fails over to the next address when one is down, and goes round them in turn', async () => {
    const dead = await deadUrl();
    const b1 = await fake({ replicaId: 'b' });
    const a = agent([dead, b1.url], { backoff: { initialMs: 20, maxMs: 100 } });
    const s1 = await b1.waitFor('stream on b', () => b1.streams[0], 3000);
    await b1.waitFor('welcomed', () => a.connected);
    // The stream on b breaks: the agent tries the dead address next, then b again.
    s1.close();
    await b1.waitFor('a second stream on b', () => b1.streams[1], 3000);
    await b1.waitFor('welcomed again', () => a.connected);
  });

  it('honours Welcome.max_reconnect_backoff: back within the bound after its replica returns from a 4 s outage', async () => {
    const BOUND_MS = 300;
    const f = await fake({ maxReconnectBackoffMs: BOUND_MS });
    const port = Number(new URL(f.url).port);
    // Without the bound the delays are 99, 198, 396, 792, 1584, 3168 ms: the try after a 4 s
    // outage comes about 6.2 s after it began.
    const a = agent([f.url], { backoff: { initialMs: 100, maxMs: 10_000, random: () => 0.99 } });
    await f.waitFor('welcomed', () => a.connected);
    await f.close();
    await new Promise((r) => setTimeout(r, 4000));
    expect(a.connected).toBe(false);
    const g = await fake({ maxReconnectBackoffMs: BOUND_MS }, port);
    const back = Date.now();
    await g.waitFor('reconnected', () => a.connected, 10_000);
    const tookMs = Date.now() - back;
    // At most one bounded delay, plus the connection itself.
    expect(tookMs).toBeLessThan(BOUND_MS + 500);
  });

  it('leoflow agent takes --server repeated or comma-separated, names a bad address, and client commands take one', async () => {
    const b1 = await fake({ replicaId: 'b' });
    const dead = await deadUrl();
    const dir = stateDir();
    const bad = await cli(dead, ['agent', '--server', `${b1.url},b:7070`, '--id', 'cli-agent', '--state-dir', dir]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain(
      'leoflow agent: --server: address 3 of 3: expected an http:// or https:// URL, got "b:7070"\n',
    );
    // The first address is down: the agent goes on to the second, then exits on Drain with --once.
    b1.onConnect = (s) => s.send({ case: 'drain', value: { reason: 'test' } });
    const once = await cli(
      dead,
      [
        'agent',
        '--server',
        b1.url,
        '--id',
        'cli-agent',
        '--state-dir',
        dir,
        '--once',
        '--ti',
        '7',
        '--log-format',
        'json',
      ],
      { timeoutMs: 20_000 },
    );
    expect(once.code, once.stdout + once.stderr).toBe(0);
    expect(b1.streams.map((s) => s.hello.agentId)).toEqual(['cli-agent']);
    const client = await cli(dead, ['--server', b1.url, 'dag', 'list']);
    expect(client.code).toBe(1);
    expect(client.stderr).toContain('--server: this command talks to one control-plane address');
  });
});
