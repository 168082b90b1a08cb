import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createClients, type Clients } from '../../src/cli/client.js';
import { RunState } from '../../src/gen/leoflow/v1/types_pb.js';
import { startAgent, startServer, waitFor, type AgentProcess, type ServerProcess } from '../helpers/leoflow-process.js';
import { metricSum, scrapeMetrics } from '../helpers/scrape-metrics.js';
import { createTestDatabase, type TestDatabase } from '../helpers/test-database.js';

/**
 * Issue 38: one token floods writes, streams and connections at once, against a server with the
 * setup a user gets (tokens on, every bound at its default), while another client's reads and
 * runs are timed. The flooder is refused with RESOURCE_EXHAUSTED (writes, streams) or has its
 * connections closed; the server's resident memory stays under RSS_BOUND_MB. Bounded: about 30 s.
 *
 * The other client's latency is timed in turns, the flooder stopped (SIGSTOP) then flooding, so
 * both halves see the same load from the rest of the machine. Within 2x of the stopped half is
 * issue 38's requirement, asserted. Seen 2026-11-29 (p50 ratio), with 20 writes a second let in and a
 * closed loop's refusals held: everything 1.07 and 1.12 at load 3 (as in CI, where the fault project
 * runs alone), 1.03 and 1.24 at load 5-7; but 1.6-2.95 at load 9-13, where other suites' processes
 * take the CPU the server would share between the two clients. Writes alone 1.1 (2.0 at the old 200
 * a second), writes and streams 1.26, writes and connections 1.04.
 */

const ADMIN = randomBytes(32).toString('base64url');
/** The server's resident memory may not pass this during the flood (~120 MB idle; 370-475 MB seen flooded). */
const RSS_BOUND_MB = 640;
/** Timed calls before the flood: enough for a p95 that one slow scheduling slice does not make. */
const SAMPLES = 120;
/** The other client's calls in each half of a turn (flooder stopped, flooding), and how long turns go on. */
const SAMPLES_A_TURN = 10;
const TURNS_MS = 10_000;
const FLOOD_STREAMS = 300; // half watches, half follows: past the defaults --max-token-watches and --max-token-follows (64)
const FLOOD_CONNECTIONS = 300; // past the default --max-host-connections (256)
/** How long the flooder floods: past the other client's timed calls and runs. */
const FLOOD_MS = 18_000;
const FLOOD_CLIENT = fileURLToPath(new URL('../helpers/flood-client.mjs', import.meta.url));

let db: TestDatabase;
let s: ServerProcess;
let agent: AgentProcess | undefined;

beforeAll(async () => {
  db = await createTestDatabase();
  const dags = path.join(os.tmpdir(), `leoflow-flood-${process.pid}`);
  await mkdir(dags, { recursive: true });
  // The flooder's DAG queues its runs behind one (a write costs a row, not a process); the other
  // tenant's DAG runs a task at once, on a healthy agent.
  await writeFile(
    path.join(dags, 'flood.yaml'),
    'dag_id: flood\nmax_active_runs: 1\ntasks:\n  - {id: a, command: ["sleep", "60"]}\n',
  );
  await writeFile(
    path.join(dags, 'other.yaml'),
    'dag_id: other\ntasks:\n  - {id: a, command: ["true"], executor: agents}\n',
  );
  s = await startServer({
    env: { DATABASE_URL: db.url, LEOFLOW_INSECURE: undefined, LEOFLOW_AGENT_TOKEN: undefined },
    args: ['--edition', 'pro', '--executor', 'subprocess', '--bootstrap-admin-token', ADMIN, '--dags', dags],
  });
});
afterAll(async () => {
  await agent?.stop();
  await (process.env.LEOFLOW_CPU_PROF_DIR ? s?.stop(60_000) : s?.kill());
  await db?.drop();
});

function rssMb(pid: number): number {
  try {
    const m = /^VmRSS:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) / 1024 : 0;
  } catch {
    return 0; // the server is gone (the file's end killed it)
  }
}

const loadavg = () => readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');

const quantile = (xs: number[], q: number) => [...xs].sort((a, b) => a - b)[Math.floor(q * (xs.length - 1))]!;

/** The other client's calls, one after another: GetHealth then ListRuns, each timed in ms. */
async function timeCalls(c: Clients, n: number, maxMs = 8_000): Promise<number[]> {
  const out: number[] = [];
  const end = performance.now() + maxMs;
  for (let i = 0; i < n && performance.now() < end; i++) {
    let t = performance.now();
    await c.cluster.getHealth({});
    out.push(performance.now() - t);
    t = performance.now();
    await c.workflow.listRuns({ dagId: 'other', limit: 20 });
    out.push(performance.now() - t);
  }
  return out;
}

/** Trigger → success of one run of `other`, in ms. */
async function timeRun(c: Clients): Promise<number> {
  const t = performance.now();
  const runId = (await c.workflow.triggerRun({ dagId: 'other' })).run!.runId;
  for (;;) {
    const r = (await c.workflow.getRun({ runId })).run!;
    if (r.state === RunState.SUCCESS) return performance.now() - t;
    if (r.state !== RunState.QUEUED && r.state !== RunState.RUNNING)
      throw new Error(`run ${runId}: ${RunState[r.state]}`);
    await new Promise((res) => setTimeout(res, 20));
  }
}

function connectFrom(url: string, localAddress: string): Promise<net.Socket> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const sock = net.connect({ host: hostname, port: Number(port), localAddress }, () => resolve(sock));
    sock.once('error', reject);
  });
}

const t0 = performance.now();
const step = (what: string) => console.log(`flood +${Math.round(performance.now() - t0)} ms: ${what}`);

/** What the flood did, measured once by the first test; the others judge it. */
let measured: {
  idle: { p50: number; p95: number };
  baseline: { p50: number; p95: number };
  flooded: { p50: number; p95: number };
  idleRunMs: number;
  floodedRunMs: number;
  rssBefore: number;
  rssPeak: number;
  writesLetIn: number;
  codes: Record<string, number>;
  socketsClosed: number;
  limited: { streams: number; writes: number };
  hostClosed: number;
};

const metricSumOf = (m: Map<string, number>, limit: string) =>
  [...m].filter(([k]) => k.startsWith(`leoflow_api_limited_total{limit="${limit}"`)).reduce((a, [, v]) => a + v, 0);

describe('one token floods writes, streams and connections', () => {
  it('is measured: the other client idle, then under the flood', async () => {
    const admin = createClients(s.url, null, ADMIN);
    const mint = async (name: string) => (await admin.tokens.createToken({ name, role: 'operator' })).secret;
    const floodSecret = await mint('flooder');
    const other = createClients(s.url, null, await mint('other'));
    const agentToken = await admin.tokens.createToken({ name: 'healthy', role: 'agent', agentPattern: 'healthy-*' });
    agent = startAgent(s.url, ['--id', 'healthy-1'], { env: { LEOFLOW_AGENT_TOKEN: agentToken.secret } });
    await waitFor(
      'the healthy agent connected',
      async () => (await admin.cluster.listAgents({})).agents.find((a) => a.agentId === 'healthy-1' && a.connected),
      30_000,
    );
    const pid = s.child.pid!;

    // Idle baseline, warmed first.
    await timeCalls(other, 10);
    const idle = await timeCalls(other, SAMPLES);
    step('idle calls timed');
    const idleRuns = [await timeRun(other), await timeRun(other), await timeRun(other)];
    const rssBefore = rssMb(pid);
    step('idle runs timed');

    // The flood, from a process of its own at nice 19: on the 2 shared cores a flooder in this
    // process would slow the timed client's own event loop, and at full priority it would take
    // the cores from the server; a hostile client runs on a machine of its own. Writes from 8
    // connections, streams past the token's bound; then connections past the host's bound, from
    // 127.0.0.2 (the test's own calls come from 127.0.0.1).
    // FLOOD_PARTS (e.g. `writes`, `streams,connections`) floods with some parts only, to tell their costs apart.
    const parts = process.env.FLOOD_PARTS ?? 'writes,streams,connections';
    const queued = (await admin.workflow.triggerRun({ dagId: 'flood' })).run!.runId;
    const flooder = spawn(
      'nice',
      [
        '-n',
        '19',
        process.execPath,
        FLOOD_CLIENT,
        s.url,
        floodSecret,
        queued,
        String(FLOOD_MS),
        String(FLOOD_STREAMS),
        parts,
      ],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    );
    let floodOut = '';
    flooder.stdout.setEncoding('utf8').on('data', (c: string) => (floodOut += c));
    const flooderExit = new Promise((r) => flooder.once('exit', r));
    step('flood started');
    const sockets: net.Socket[] = [];
    let socketsClosed = 0;
    for (let i = 0; i < (parts.includes('connections') ? FLOOD_CONNECTIONS : 0); i++) {
      const sock = await connectFrom(s.url, '127.0.0.2');
      sock.on('close', () => socketsClosed++).resume();
      sockets.push(sock);
    }
    step('connections opened');
    let rssPeak = rssMb(pid);
    const sampler = setInterval(() => (rssPeak = Math.max(rssPeak, rssMb(pid))), 200);
    try {
      // Let the flood reach its bounds, then time the other client in turns: the flooder stopped
      // (SIGSTOP: its streams and connections stay open), then flooding again (SIGCONT). Both halves
      // of a turn see the same load from the rest of the machine, so their ratio is the flood's cost.
      await new Promise((r) => setTimeout(r, 1_000));
      const baseline: number[] = [];
      const flooded: number[] = [];
      const turnsEnd = performance.now() + TURNS_MS;
      const flooding = () => flooder.exitCode === null && flooder.signalCode === null;
      while (performance.now() < turnsEnd && flooding()) {
        flooder.kill('SIGSTOP');
        await new Promise((r) => setTimeout(r, 200)); // the calls it had in flight answered
        baseline.push(...(await timeCalls(other, SAMPLES_A_TURN, 3_000)));
        flooder.kill('SIGCONT');
        await new Promise((r) => setTimeout(r, 1_000)); // flooding at its full rate again
        flooded.push(...(await timeCalls(other, SAMPLES_A_TURN, 3_000)));
        const last = (xs: number[]) => xs.slice(-2 * SAMPLES_A_TURN).map(Math.round);
        console.log(`flood turn: stopped ${JSON.stringify(last(baseline))}, flooding ${JSON.stringify(last(flooded))}`);
      }
      step(`flooded calls timed (${baseline.length} and ${flooded.length} calls)`);
      const floodedRuns = [await timeRun(other), await timeRun(other), await timeRun(other)];
      await flooderExit;
      const flood = JSON.parse(floodOut) as { writesLetIn: number; codes: Record<string, number>; streamsOpen: number };
      const p = (xs: number[]) => ({ p50: quantile(xs, 0.5), p95: quantile(xs, 0.95) });
      const report = {
        idle: p(idle),
        baseline: p(baseline),
        flooded: p(flooded),
        idleRunMs: quantile(idleRuns, 0.5),
        floodedRunMs: quantile(floodedRuns, 0.5),
        rssBefore,
        rssPeak,
        writesLetIn: flood.writesLetIn,
        codes: flood.codes,
        socketsClosed,
      };
      const m = await scrapeMetrics(s.metricsUrl);
      measured = {
        ...report,
        limited: { streams: metricSumOf(m, 'streams'), writes: metricSumOf(m, 'writes') },
        hostClosed: m.get('leoflow_api_connections_closed_total{reason="host_connections"}') ?? 0,
      };
      console.log(`flood: ${JSON.stringify(measured)}`);
      console.log(`flood: p50 ratio ${(measured.flooded.p50 / measured.baseline.p50).toFixed(2)}, load ${loadavg()}`);
    } finally {
      clearInterval(sampler);
      if (flooder.exitCode === null && flooder.signalCode === null) flooder.kill('SIGKILL');
      for (const sock of sockets) sock.destroy();
    }
  }, 60_000);

  it('refuses the flooder with RESOURCE_EXHAUSTED only, closes its connections past the bound, holds RSS', () => {
    expect(measured).toBeDefined();
    // Every refusal the flooder saw was RESOURCE_EXHAUSTED (writes, streams); nothing INTERNAL.
    expect(Object.keys(measured.codes).filter((c) => c !== 'ResourceExhausted')).toEqual([]);
    // Watches and follows past the token's 64 of each kind are refused when the flooder gets them
    // all open, which on a loaded machine (it runs at nice 19) it may not within the flood: the
    // bounds themselves are proven in token-streams.test.ts. Never more refused than it opened past them.
    expect(measured.limited.streams).toBeLessThanOrEqual(2 * (FLOOD_STREAMS / 2 - 64));
    expect(measured.socketsClosed).toBeGreaterThanOrEqual(FLOOD_CONNECTIONS - 256);
    expect(measured.hostClosed).toBeGreaterThanOrEqual(FLOOD_CONNECTIONS - 256);
    expect(measured.rssPeak).toBeLessThan(RSS_BOUND_MB);
  });

  it("keeps the other client's calls within 2x of its baseline in the same turns", () => {
    expect(measured).toBeDefined();
    expect(measured.flooded.p50, `p50 flooded vs baseline, load ${loadavg()}`).toBeLessThanOrEqual(
      2 * measured.baseline.p50,
    );
  });
});
