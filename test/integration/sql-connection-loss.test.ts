import net from 'node:net';
import postgres from 'postgres';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { isConnectionError } from '../../src/db/is-connection-error.js';
import { createSql, type Sql } from '../../src/db/sql.js';
import { freePort } from '../helpers/global-setup.js';
import { waitFor } from '../helpers/leoflow-process.js';
import { startTcpProxy, type TcpProxyOptions } from '../helpers/tcp-proxy.js';
import { createTestDatabase, type TestDatabase } from '../helpers/test-database.js';

/**
 * What the Postgres driver does when a connection is lost under a query: a restart of Postgres
 * drops every connection at once, and whatever the driver does then must cost that query, never
 * the process, and never the pool's later queries. Each case cuts the connection at the moment
 * that broke postgres.js 3.4.9 (src/db/sql.ts says what is patched and why).
 */

let db: TestDatabase;
const pools: Sql[] = [];
const closers: (() => Promise<void>)[] = [];
/**
 * Errors thrown from the driver's timers, and its promises rejected with no one to handle them:
 * each one ends a replica, which has no test runner around it.
 */
const uncaught: unknown[] = [];
const onUncaught = (err: unknown) => uncaught.push(err);

beforeAll(async () => {
  db = await createTestDatabase();
  process.on('uncaughtException', onUncaught);
  process.on('unhandledRejection', onUncaught);
});

afterEach(async () => {
  uncaught.splice(0);
  for (const p of pools.splice(0)) await p.end({ timeout: 1 }).catch(() => {});
  for (const c of closers.splice(0)) await c();
});

afterAll(async () => {
  process.off('uncaughtException', onUncaught);
  process.off('unhandledRejection', onUncaught);
  await db.drop();
});

/** A pool of one connection to the test database through a proxy the test can cut. */
async function poolBehindProxy(opts: TcpProxyOptions = {}): Promise<{ sql: Sql; cut(): void }> {
  const u = new URL(db.url);
  const proxy = await startTcpProxy({ host: u.hostname, port: Number(u.port) }, opts);
  closers.push(() => proxy.close());
  u.port = String(proxy.port);
  const sql = createSql(u.toString(), { max: 1, applicationName: 'leoflow-test-loss' });
  pools.push(sql);
  return { sql, cut: () => proxy.cut() };
}

type Outcome = { ok: unknown } | { error: string } | { pending: string[] };

/** How a query settles within `ms`: its value, its error, or still pending (with what was thrown meanwhile). */
async function outcome(q: Promise<unknown>, ms = 3000): Promise<Outcome> {
  let timer: NodeJS.Timeout | undefined;
  const pending = new Promise<Outcome>(
    (resolve) => (timer = setTimeout(() => resolve({ pending: uncaught.map(String) }), ms)),
  );
  const settled = q.then(
    (v) => ({ ok: Array.isArray(v) ? [...v] : v }),
    (e: { code?: string; message?: string }) => ({
      error: isConnectionError(e) ? 'connection error' : String(e.code ?? e.message),
    }),
  );
  const r = await Promise.race([settled, pending]);
  clearTimeout(timer);
  return r;
}

/** Lets timers and immediates the driver scheduled run, so an error they throw is seen here. */
const settle = () => new Promise((r) => setTimeout(r, 100));

describe('a connection lost under the driver', () => {
  it('a reserved connection whose socket closed: its next queries are rejected, the process lives, release() leaves the pool working', async () => {
    const { sql, cut } = await poolBehindProxy();
    const reserved = await sql.reserve();
    expect(await outcome(reserved`select 1 as x`)).toEqual({ ok: [{ x: 1 }] });
    cut();
    await settle();
    expect(await outcome(reserved`select 2 as x`)).toEqual({ error: 'connection error' });
    expect(await outcome(reserved`select 3 as x`)).toEqual({ error: 'connection error' });
    reserved.release();
    // The only connection of the pool: the pool must connect it anew, not hand out the dead one.
    expect(await outcome(sql`select 4 as x`)).toEqual({ ok: [{ x: 4 }] });
    await settle();
    expect(uncaught).toEqual([]);
  });

  it('a transaction whose connection drops mid-query: it fails with a connection error, nothing is written to the dead socket, the next query runs', async () => {
    const { sql, cut } = await poolBehindProxy();
    const tx = sql.begin(async (t) => {
      await t`select 1`;
      setTimeout(cut, 50);
      await t`select pg_sleep(1)`;
    });
    expect(await outcome(tx)).toEqual({ error: 'connection error' });
    await settle();
    expect(await outcome(sql`select 5 as x`)).toEqual({ ok: [{ x: 5 }] });
    expect(uncaught).toEqual([]);
  });

  it('a transaction whose connection was lost runs none of its later statements, not even once the pool has connected again', async () => {
    const { sql, cut } = await poolBehindProxy();
    let late: Promise<Outcome> | undefined;
    const tx = sql.begin(async (t) => {
      await t`select 1`;
      setTimeout(cut, 50);
      await t`select pg_sleep(1)`.catch(() => {});
      // The pool's only connection is made again, for a query outside the transaction ...
      await sql`select 2`;
      // ... and a statement of the lost transaction must not run there, outside any transaction.
      late = outcome(t`select 3 as x`);
    });
    expect(await outcome(tx)).toEqual({ error: 'connection error' });
    await waitFor('the late statement sent', async () => late, 5000);
    expect(await late).toEqual({ error: 'connection error' });
    expect(uncaught).toEqual([]);
  });

  it('queries waiting behind a reserved connection are rejected when it closes, not left pending forever', async () => {
    const { sql, cut } = await poolBehindProxy();
    const reserved = await sql.reserve();
    // A statement with parameters not yet prepared is described first: the connection takes no
    // other query until it has answered, so the next one waits in the reservation's own queue.
    const first = reserved`select pg_sleep(1), ${1}::int as x`.execute();
    const second = reserved`select 2 as x`.execute();
    setTimeout(cut, 200);
    expect(await outcome(first)).toEqual({ error: 'connection error' });
    expect(await outcome(second)).toEqual({ error: 'connection error' });
    reserved.release();
    expect(await outcome(sql`select 6 as x`)).toEqual({ ok: [{ x: 6 }] });
    await settle();
    expect(uncaught).toEqual([]);
  });

  it('a connection that closes while a write waits for the next turn of the event loop connects again cleanly', async () => {
    // The driver buffers a small write until the next turn (setImmediate). A socket whose close is
    // handled in this turn, after a query was written in the check phase (as the report batcher
    // writes), must not leave that buffer behind for the next connection's startup.
    const u = new URL(db.url);
    let socket: net.Socket | undefined;
    // The driver's `socket` option (a factory of connected sockets, in its README but not its types)
    // hands the test the socket itself, to close it at an exact point of the event loop.
    const options = {
      max: 1,
      onnotice: () => {},
      connect_timeout: 2,
      socket: () =>
        new Promise<net.Socket>((resolve, reject) => {
          const s = net.connect(Number(u.port), u.hostname);
          s.once('connect', () => resolve((socket = s))).once('error', reject);
        }),
    };
    const sql = postgres(db.url, options as postgres.Options<Record<string, never>>);
    pools.push(sql as unknown as Sql);
    expect(await outcome(sql`select 1 as x`)).toEqual({ ok: [{ x: 1 }] });
    const inFlight = await new Promise<{ query: Promise<unknown> }>((resolve) =>
      setImmediate(() => {
        socket!.destroy();
        resolve({ query: sql`select 2 as x`.execute() });
      }),
    );
    expect(await outcome(inFlight.query)).toEqual({ error: 'connection error' });
    // Before the fix this timed out (CONNECT_TIMEOUT) on every later query: the startup message
    // was appended to the dead session's buffer and never sent.
    expect(await outcome(sql`select 7 as x`, 5000)).toEqual({ ok: [{ x: 7 }] });
    expect(await outcome(sql`select 8 as x`, 5000)).toEqual({ ok: [{ x: 8 }] });
    expect(uncaught).toEqual([]);
  });

  it('a new connection lost while the driver reads the array types: nothing is left unhandled, and the reservation that waited for it is served', async () => {
    // postgres.js reads the catalog's array types as the first statement of every connection, on
    // a promise of its own; a reservation (the report batcher's) waits for that connection.
    const { sql } = await poolBehindProxy({ cutOnceWhenClientSends: 'typarray' });
    const reservation = sql.reserve().then(async (reserved) => {
      try {
        return await reserved`select 9 as x`;
      } finally {
        reserved.release();
      }
    });
    expect(await outcome(reservation)).toEqual({ ok: [{ x: 9 }] });
    expect(await outcome(sql`select 10 as x`)).toEqual({ ok: [{ x: 10 }] });
    await settle();
    expect(uncaught.map(String)).toEqual([]);
  });

  it("a backend terminated mid-query (a FATAL, then the close): the next query is not failed with the dead session's error", async () => {
    const victim = createSql(db.url, { max: 1, applicationName: 'leoflow-test-victim' });
    pools.push(victim);
    await victim`select 1`;
    // Its outcome is taken at once: the close can reach the driver before the terminate's own
    // answer reaches the test, and a rejection with no handler yet counts as unhandled.
    const busy = outcome(victim`select pg_sleep(5)`.execute(), 10_000);
    const sleeping = () =>
      db.sql`select pid from pg_stat_activity where application_name = 'leoflow-test-victim' and datname = ${db.name} and state = 'active'`;
    await waitFor('the sleep running', async () => (await sleeping()).length > 0, 5000);
    await db.sql`select pg_terminate_backend(pid) from pg_stat_activity where application_name = 'leoflow-test-victim' and datname = ${db.name}`;
    expect(await busy).toEqual({ error: 'connection error' });
    // Postgres 57P01 "terminating connection due to administrator command" belonged to the old session.
    expect(await outcome(victim`select 11 as x`)).toEqual({ ok: [{ x: 11 }] });
    expect(uncaught).toEqual([]);
  });

  it('a reservation refused while Postgres is unreachable takes no connection from the pool once it is back', async () => {
    const u = new URL(db.url);
    const target = { host: u.hostname, port: Number(u.port) };
    u.port = String(await freePort()); // nothing listens there yet
    const sql = createSql(u.toString(), { max: 1, applicationName: 'leoflow-test-loss' });
    pools.push(sql);
    expect(await outcome(sql.reserve())).toEqual({ error: 'connection error' });
    const proxy = await startTcpProxy(target, { port: Number(u.port) });
    closers.push(() => proxy.close());
    // The pool connects again in the background; the refused reservation must not be handed it.
    await new Promise((r) => setTimeout(r, 1500));
    expect(await outcome(sql`select 12 as x`)).toEqual({ ok: [{ x: 12 }] });
    expect(uncaught).toEqual([]);
  });
});
