import { randomBytes, randomUUID } from 'node:crypto';
import http2 from 'node:http2';
import net from 'node:net';
import { writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { create } from '@bufbuild/protobuf';
import { Code, ConnectError, createClient } from '@connectrpc/connect';
import { createGrpcTransport } from '@connectrpc/connect-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createClients } from '../../src/cli/client.js';
import { AgentService, ConnectRequestSchema, ProtocolVersion } from '../../src/gen/leoflow/v1/agent_pb.js';
import { startServer, waitFor, type ServerProcess } from '../helpers/leoflow-process.js';
import { startProWithAuth } from '../helpers/pro-with-auth.js';
import { metricSum, scrapeMetrics } from '../helpers/scrape-metrics.js';
import { createTestDatabase, type TestDatabase } from '../helpers/test-database.js';

/**
 * Issue 38: one client's flood costs that client alone. Past `--max-token-writes` a second, its
 * writes are refused with RESOURCE_EXHAUSTED, naming the limit and, in the trailers, how long to
 * wait; past `--max-host-connections` its connections are closed as they come; a connection that
 * carries no call is closed after `--idle-connection-timeout`; an agent token holds at most
 * `--max-token-agents` agent rows. Other clients go on; all is counted.
 */

const ADMIN = randomBytes(32).toString('base64url');
let db: TestDatabase;
const servers: ServerProcess[] = [];
let dagFile: string;

beforeAll(async () => {
  db = await createTestDatabase();
  dagFile = path.join(os.tmpdir(), `leoflow-bounds-${process.pid}.yaml`);
  await writeFile(dagFile, 'dag_id: w\ntasks:\n  - {id: a, command: ["true"]}\n');
});
afterAll(async () => {
  for (const s of servers) await s.kill();
  await db?.drop();
});

/** How `n` writes at once of one client ended: the codes, and the first refusal. */
async function flood(n: number, write: () => Promise<unknown>) {
  const ended = await Promise.all(
    Array.from({ length: n }, () =>
      write().then(
        () => null,
        (err: unknown) => ConnectError.from(err),
      ),
    ),
  );
  return { passed: ended.filter((e) => e === null).length, refused: ended.filter((e) => e !== null) };
}

describe('--max-token-writes', () => {
  it('refuses a token past its writes a second or its writes at once, says how long to wait, and holds no other token back', async () => {
    const s = await startProWithAuth(db.url, ADMIN, ['--dags', dagFile]);
    servers.push(s);
    const admin = createClients(s.url, null, ADMIN);
    const floodSecret = (await admin.tokens.createToken({ name: 'f', role: 'operator' })).secret;
    // Eight connections: one HTTP/2 connection holds 100 calls in flight, and paces the rest itself.
    const connections = Array.from({ length: 8 }, () => createClients(s.url, null, floodSecret));
    const flooder = connections[0]!;
    const other = createClients(s.url, null, (await admin.tokens.createToken({ name: 'o', role: 'operator' })).secret);

    const t = performance.now();
    let n = 0;
    const f = await flood(800, () => connections[n++ % 8]!.workflow.triggerRun({ dagId: 'w' }));
    const seconds = (performance.now() - t) / 1000;
    // Of 800 at once, the bucket lets 200 by (ten seconds of the default 20) and 20 a second more;
    // of those, 4 run at once (--max-token-concurrent-writes) and 64 wait in line. The rest are
    // refused, by either bound.
    expect(f.passed).toBeGreaterThanOrEqual(4 + 64);
    expect(f.passed).toBeLessThanOrEqual(200 + Math.ceil(seconds * 20));
    for (const err of f.refused) expect(err!.code, String(err)).toBe(Code.ResourceExhausted);
    const byRate = f.refused.filter((e) => /made more than 20 writes a second/.test(e!.rawMessage));
    const byShare = f.refused.filter((e) => /writes running and 64 waiting/.test(e!.rawMessage));
    expect(byRate.length + byShare.length).toBe(f.refused.length);
    expect(byRate.length).toBeGreaterThan(0);
    expect(byRate[0]!.rawMessage).toMatch(
      /^TriggerRun: API token "[^"]+" made more than 20 writes a second, the limit \(--max-token-writes 20\): retry in \d+ ms$/,
    );
    expect(byShare.length).toBeGreaterThan(0);
    expect(byShare[0]!.rawMessage).toMatch(
      /^TriggerRun: API token "[^"]+" has 4 writes running and 64 waiting, the limit \(--max-token-concurrent-writes 4, and 64 waiting\): wait for answers before sending more$/,
    );
    expect(Number(byRate[0]!.metadata.get('retry-after-ms'))).toBeGreaterThan(0);
    // Another token writes meanwhile; reads are not writes.
    expect((await other.workflow.triggerRun({ dagId: 'w' })).created).toBe(true);
    expect((await flooder.workflow.listRuns({ dagId: 'w', limit: 1 })).runs).toHaveLength(1);
    expect(metricSum(await scrapeMetrics(s.metricsUrl), 'leoflow_api_limited_total')).toBe(f.refused.length);
    // Nothing refused was written: the runs are the writes let through, and the other token's one.
    const [row] = await db.sql<{ n: number }[]>`select count(*)::int as n from dag_runs`;
    expect(row!.n).toBe(f.passed + 1);
    // Waiting as told lets the next write in.
    await new Promise((r) => setTimeout(r, Number(byRate.at(-1)!.metadata.get('retry-after-ms')) + 50));
    expect((await flooder.workflow.triggerRun({ dagId: 'w' })).created).toBe(true);
  });
});

/** Opens a TCP connection from `localAddress` to the server; resolves once connected. */
function connectFrom(url: string, localAddress: string): Promise<net.Socket> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const s = net.connect({ host: hostname, port: Number(port), localAddress }, () => resolve(s));
    s.once('error', reject);
  });
}

/** Resolves true once the socket is closed by the server, false if it is still open after `ms`. */
function closedWithin(s: net.Socket, ms: number): Promise<boolean> {
  if (s.destroyed || s.readableEnded) return Promise.resolve(true);
  return new Promise((resolve) => {
    const t = setTimeout(() => resolve(false), ms);
    s.once('close', () => (clearTimeout(t), resolve(true)));
    s.resume();
  });
}

describe('connections', () => {
  it('tells every HTTP/2 connection it may have 256 calls open at once (Node would allow 2^32-1)', async () => {
    const s = await startServer({ env: { DATABASE_URL: db.url }, args: ['--dags', dagFile] });
    servers.push(s);
    const session = http2.connect(s.url);
    try {
      const settings = await new Promise<http2.Settings>((resolve, reject) => {
        session.once('remoteSettings', resolve);
        session.once('error', reject);
      });
      expect(settings.maxConcurrentStreams).toBe(256);
    } finally {
      session.destroy();
    }
  });

  it('holds one host to --max-host-connections (256 by default): more are closed at once, other hosts are served', async () => {
    const s = await startServer({ env: { DATABASE_URL: db.url }, args: ['--dags', dagFile] });
    servers.push(s);
    // 127.0.0.2 is loopback too: the flooding host, apart from the test's own 127.0.0.1.
    const held: net.Socket[] = [];
    try {
      for (let i = 0; i < 256; i++) held.push(await connectFrom(s.url, '127.0.0.2'));
      const past = await Promise.all(Array.from({ length: 20 }, () => connectFrom(s.url, '127.0.0.2')));
      held.push(...past);
      for (const p of past) expect(await closedWithin(p, 2_000)).toBe(true);
      // The 256 first are still open; another host's calls go on.
      expect(await closedWithin(held[0]!, 200)).toBe(false);
      expect((await createClients(s.url).workflow.triggerRun({ dagId: 'w' })).created).toBe(true);
      const m = await scrapeMetrics(s.metricsUrl);
      expect(m.get('leoflow_api_connections_closed_total{reason="host_connections"}')).toBe(20);
    } finally {
      for (const h of held) h.destroy();
    }
  });

  it('closes a connection that carries no call for --idle-connection-timeout, and never one a quiet watch holds', async () => {
    const s = await startServer({
      env: { DATABASE_URL: db.url },
      args: ['--dags', dagFile, '--idle-connection-timeout', '1s'],
    });
    servers.push(s);
    const unused = await connectFrom(s.url, '127.0.0.1');
    // An HTTP/1.1 connection (a browser's) left open after its call is closed the same way.
    const h1 = await connectFrom(s.url, '127.0.0.1');
    const answer = new Promise<string>((resolve) => h1.once('data', (b: Buffer) => resolve(b.toString())));
    h1.write(
      'POST /leoflow.v1.ClusterService/GetHealth HTTP/1.1\r\nhost: leoflow\r\n' +
        'content-type: application/json\r\ncontent-length: 2\r\n\r\n{}',
    );
    expect(await answer).toMatch(/^HTTP\/1\.1 200 /);
    const api = createClients(s.url);
    const ctl = new AbortController();
    const seen: string[] = [];
    const watch = (async () => {
      for await (const b of api.workflow.watchRuns({}, { signal: ctl.signal }))
        for (const e of b.events) seen.push(e.kind);
    })().catch((err: unknown) => ConnectError.from(err));
    try {
      expect(await closedWithin(unused, 4_000)).toBe(true);
      expect(await closedWithin(h1, 4_000)).toBe(true);
      // The watch has been quiet for longer than the timeout, and still gets what happens next.
      await new Promise((r) => setTimeout(r, 1_500));
      const other = createClients(s.url);
      const runId = (await other.workflow.triggerRun({ dagId: 'w' })).run!.runId;
      await waitFor('the quiet watch sees the run', async () => seen.includes('run.state'), 10_000);
      expect(runId).not.toBe('');
      const m = await scrapeMetrics(s.metricsUrl);
      expect(m.get('leoflow_api_connections_closed_total{reason="idle"}')).toBeGreaterThanOrEqual(2);
    } finally {
      ctl.abort();
      expect((await watch)?.code).toBe(Code.Canceled);
      unused.destroy();
      h1.destroy();
    }
  });
});

describe('--max-token-agents', () => {
  it('refuses a Hello for one agent id more than an agent token may hold; its known ids and other tokens go on', async () => {
    const s = await startProWithAuth(db.url, ADMIN, ['--max-token-agents', '2']);
    servers.push(s);
    const admin = createClients(s.url, null, ADMIN);
    const mint = async (pattern: string) =>
      (await admin.tokens.createToken({ name: pattern, role: 'agent', agentPattern: pattern })).secret;
    const fleetToken = await mint('fleet-*');
    const otherToken = await mint('other-*');
    const client = createClient(AgentService, createGrpcTransport({ baseUrl: s.url }));
    // One process per agent id: saying Hello again as it, before its last stream is seen gone, is a
    // reconnect of the same process, not a duplicate id (ALREADY_EXISTS).
    const incarnations = new Map<string, string>();
    /** Says Hello as `agentId`; resolves with how the stream answered (null: welcomed), then hangs up. */
    const hello = async (agentId: string, token: string): Promise<ConnectError | null> => {
      const ctl = new AbortController();
      const requests = (async function* () {
        yield create(ConnectRequestSchema, {
          msg: {
            case: 'hello',
            value: {
              protocolVersion: ProtocolVersion.PROTOCOL_VERSION_2,
              agentId,
              slots: 1,
              incarnationId: incarnations.get(agentId) ?? incarnations.set(agentId, randomUUID()).get(agentId)!,
              token,
            },
          },
        });
        await new Promise((r) => ctl.signal.addEventListener('abort', r));
      })();
      try {
        for await (const m of client.connect(requests, { signal: ctl.signal })) {
          if (m.msg.case === 'welcome') return null;
        }
        return null;
      } catch (err) {
        return ConnectError.from(err);
      } finally {
        ctl.abort();
      }
    };
    expect(await hello('fleet-1', fleetToken)).toBeNull();
    expect(await hello('fleet-2', fleetToken)).toBeNull();
    const third = await hello('fleet-3', fleetToken);
    expect(third?.code, String(third)).toBe(Code.ResourceExhausted);
    expect(third?.rawMessage).toMatch(
      /^hello\.agent_id: API token "[^"]+" holds 2 agents, the limit \(--max-token-agents 2\): reuse an agent id, or forget gone agents \(leoflow agents forget\)$/,
    );
    // Nothing was written for it; a known id comes back, and another token has its own count.
    expect((await db.sql`select 1 from agents where agent_id = 'fleet-3'`).length).toBe(0);
    expect(await hello('fleet-1', fleetToken)).toBeNull();
    expect(await hello('other-1', otherToken)).toBeNull();
    const m = await scrapeMetrics(s.metricsUrl);
    expect(m.get('leoflow_api_limited_total{limit="agents",rpc="Connect"}')).toBe(1);
  });
});
