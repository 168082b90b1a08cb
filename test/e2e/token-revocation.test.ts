import { randomBytes } from 'node:crypto';
import { Code, ConnectError } from '@connectrpc/connect';
import { describe, expect, it } from 'vitest';
import { createClients } from '../../src/cli/client.js';
import { cli, startAgent, startServer, waitFor, type ServerProcess } from '../helpers/leoflow-process.js';
import { replicasForFile } from '../helpers/server-fixture.js';
import { startProWithAuth } from '../helpers/pro-with-auth.js';
import { metricSum, scrapeMetrics } from '../helpers/scrape-metrics.js';

/**
 * Issue 38: revoking a token ends the streams it let in, within a second, on every replica: a
 * viewer's WatchRuns ends with UNAUTHENTICATED, an agent's stream is cut and the agent, refused
 * at its next Hello, stops. A token that expires ends its streams when it does.
 */

const ADMIN = randomBytes(32).toString('base64url');
const f = replicasForFile();
const { servers, agents } = f;

/** A Pro replica with auth on, its heartbeats fast. */
async function start(args: string[]): Promise<ServerProcess> {
  const s = await startProWithAuth(f.db.url, ADMIN, [
    '--heartbeat-interval',
    '300ms',
    '--heartbeat-threshold',
    '3s',
    ...args,
  ]);
  servers.push(s);
  return s;
}

/** Reads a stream to its end; resolves with how it ended and when. */
async function readToEnd(stream: AsyncIterable<unknown>): Promise<{ err: ConnectError | null; at: number }> {
  try {
    for await (const _ of stream);
    return { err: null, at: Date.now() };
  } catch (err) {
    return { err: ConnectError.from(err), at: Date.now() };
  }
}

describe('a revoked or expired token', () => {
  it("ends the streams it let in within a second, on another replica too: a watcher's and an agent's", async () => {
    const a = await start(['--replica-id', 'rev-a']);
    const b = await start(['--replica-id', 'rev-b']);
    const admin = createClients(a.url, null, ADMIN);
    const viewer = (await admin.tokens.createToken({ name: 'watcher', role: 'viewer' })).secret;
    const agentToken = await admin.tokens.createToken({ name: 'agent', role: 'agent', agentPattern: 'rev-*' });

    const watch = readToEnd(createClients(b.url, null, viewer).workflow.watchRuns({}));
    const agent = startAgent(b.url, ['--id', 'rev-1'], { env: { LEOFLOW_AGENT_TOKEN: agentToken.secret } });
    agents.push(agent);
    await waitFor(
      'the agent connected to rev-b',
      async () => {
        const [r] = await f.db.sql<
          { c: string | null }[]
        >`select connected_replica as c from agents where agent_id = 'rev-1'`;
        return r?.c === 'rev-b';
      },
      30_000,
    );
    await new Promise((r) => setTimeout(r, 300)); // the watch is open

    const viewerId = (await admin.tokens.listTokens({})).tokens.find((t) => t.name === 'watcher')!.id;
    const revokedAt = Date.now();
    await admin.tokens.revokeToken({ id: viewerId });
    await admin.tokens.revokeToken({ id: agentToken.token!.id });

    const w = await watch;
    expect(w.err?.code, String(w.err)).toBe(Code.Unauthenticated);
    expect(w.err?.rawMessage).toBe(`API token "${viewerId}" was revoked`);
    expect(w.at - revokedAt).toBeLessThan(1000);
    await waitFor(
      'the agent cut off',
      async () => {
        const [r] = await f.db.sql<
          { c: string | null }[]
        >`select connected_replica as c from agents where agent_id = 'rev-1'`;
        return r?.c === null;
      },
      1000,
      20,
    );
    // Refused at its next Hello (UNAUTHENTICATED is final for an agent): it stops.
    const exit = await Promise.race([agent.exited, new Promise<null>((r) => setTimeout(() => r(null), 10_000))]);
    expect(exit, agent.output()).not.toBeNull();
    expect(exit!.code).not.toBe(0);
    expect(agent.output()).toContain('was revoked');
  });

  it('ends them too when the token is revoked straight in the database (`leoflow token revoke --database-url`)', async () => {
    const a = servers[0]!;
    const admin = createClients(a.url, null, ADMIN);
    const made = await admin.tokens.createToken({ name: 'direct', role: 'viewer' });
    const watch = readToEnd(createClients(a.url, null, made.secret).workflow.watchRuns({}));
    await new Promise((r) => setTimeout(r, 300));
    const revokedAt = Date.now();
    const r = await cli(null, ['token', 'revoke', made.token!.id, '--database-url', f.db.url]);
    expect(r.code, r.stderr).toBe(0);
    const w = await watch;
    expect(w.err?.code, String(w.err)).toBe(Code.Unauthenticated);
    expect(w.at - revokedAt).toBeLessThan(1500);
  });

  it('`leoflow token revoke` says how many streams it ended on the server that answered', async () => {
    const a = servers[0]!;
    const admin = createClients(a.url, null, ADMIN);
    const made = await admin.tokens.createToken({ name: 'two-watches', role: 'viewer' });
    const before = metricSum(await scrapeMetrics(a.metricsUrl), 'leoflow_watchers_connected');
    const watches = [1, 2].map(() => readToEnd(createClients(a.url, null, made.secret).workflow.watchRuns({})));
    await waitFor(
      'both watches open',
      async () => metricSum(await scrapeMetrics(a.metricsUrl), 'leoflow_watchers_connected') >= before + 2,
    );
    const r = await cli(a.url, ['token', 'revoke', made.token!.id], { env: { LEOFLOW_TOKEN: ADMIN } });
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toBe(
      `revoked token ${made.token!.id}: ended 2 open streams on this server; the other replicas end theirs as they are told\n`,
    );
    for (const w of watches) expect((await w).err?.code).toBe(Code.Unauthenticated);
  });

  it('ends a stream when its token expires', async () => {
    const a = servers[0]!;
    const admin = createClients(a.url, null, ADMIN);
    const { secret } = await admin.tokens.createToken({ name: 'short', role: 'viewer', ttlSeconds: 2n });
    const opened = Date.now();
    const w = await readToEnd(createClients(a.url, null, secret).workflow.watchRuns({}));
    expect(w.err?.code, String(w.err)).toBe(Code.Unauthenticated);
    expect(w.err?.rawMessage).toMatch(/^API token "[^"]+" expired at /);
    expect(w.at - opened).toBeGreaterThan(1000);
    expect(w.at - opened).toBeLessThan(4000);
  });

  it('holds each token to --max-token-watches watch streams: the one past it is refused, naming the limit, and other tokens go on', async () => {
    const s = await start(['--replica-id', 'rev-cap', '--max-token-watches', '3']);
    const admin = createClients(s.url, null, ADMIN);
    const flood = createClients(
      s.url,
      null,
      (await admin.tokens.createToken({ name: 'flood', role: 'viewer' })).secret,
    );
    const other = createClients(
      s.url,
      null,
      (await admin.tokens.createToken({ name: 'other', role: 'viewer' })).secret,
    );
    const open = (c: typeof flood) => {
      const ctl = new AbortController();
      const ended = readToEnd(c.workflow.watchRuns({}, { signal: ctl.signal }));
      return { ctl, ended };
    };
    const held = [open(flood), open(flood), open(flood)];
    await new Promise((r) => setTimeout(r, 500)); // the three are open
    const fourth = await readToEnd(flood.workflow.watchRuns({}));
    expect(fourth.err?.code, String(fourth.err)).toBe(Code.ResourceExhausted);
    expect(fourth.err?.rawMessage).toMatch(
      /^API token "[^"]+" holds 3 open watch streams \(WatchRun, WatchRuns, WatchCleanHistory\), the limit \(--max-token-watches 3\): close some first$/,
    );
    // Another token is not held back by this one's flood.
    const theirs = open(other);
    await new Promise((r) => setTimeout(r, 300));
    // One closed: room for one more.
    held[0]!.ctl.abort();
    await held[0]!.ended;
    await new Promise((r) => setTimeout(r, 200));
    const again = open(flood);
    await new Promise((r) => setTimeout(r, 300));
    for (const w of [held[1]!, held[2]!, theirs, again]) w.ctl.abort();
    for (const w of [held[1]!, held[2]!, theirs, again]) {
      const r = await w.ended;
      // Ended by the client's own cancel, not refused.
      expect(r.err?.code, String(r.err)).toBe(Code.Canceled);
    }
  });
});
