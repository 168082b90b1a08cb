import { describe, expect, it } from 'vitest';
import { startServer, waitFor, type ServerProcess } from '../helpers/leoflow-process.js';
import { startTcpProxy } from '../helpers/tcp-proxy.js';
import { replicasForFile } from '../helpers/server-fixture.js';

/**
 * The probes a Kubernetes deployment points at (`/healthz`, `/readyz` on the metrics port), on a
 * real Pro replica whose database connection goes through a proxy the test can close: readiness
 * follows the database, liveness follows the scheduler loop and not the database, and an observer
 * (which does not migrate) is not ready while a migration is missing.
 */

const PRO = [
  '--edition',
  'pro',
  '--executor',
  'subprocess',
  '--tick-interval',
  '200ms',
  '--leader-watchdog',
  '500ms',
  '--loop-stall-threshold',
  '1s',
];

const f = replicasForFile({ tmpPrefix: 'leoflow-probes-' });
const { servers } = f;

async function probe(s: ServerProcess, path: string): Promise<{ status: number; body: string }> {
  const res = await fetch(s.metricsUrl.replace(/\/metrics$/, path));
  return { status: res.status, body: await res.text() };
}

/** Polls `path` until it answers 503 (10 s at most); resolves with that answer. */
function probeFails(s: ServerProcess, path: string): Promise<{ status: number; body: string }> {
  return waitFor(
    `${path.slice(1)} fails`,
    async () => {
      const r = await probe(s, path);
      return r.status === 503 ? r : null;
    },
    10_000,
  );
}

describe('health probes', () => {
  it('/readyz fails naming the database while it is unreachable, and recovers; /healthz stays 200', async () => {
    const target = new URL(f.db.url);
    let proxy = await startTcpProxy({ host: target.hostname, port: Number(target.port) });
    const viaProxy = new URL(f.db.url);
    viaProxy.port = String(proxy.port);
    const s = await startServer({
      env: { DATABASE_URL: viaProxy.toString() },
      args: [...PRO, '--replica-id', 'probed'],
    });
    servers.push(s);

    expect(await probe(s, '/healthz')).toMatchObject({
      status: 200,
      body: expect.stringMatching(/^ok\nok   scheduler_loop: /),
    });
    const ready = await probe(s, '/readyz');
    expect(ready.status).toBe(200);
    expect(ready.body).toMatch(
      /^ok\nok   serving: not stopping\nok   api: listening\nok   database: reachable \(\d+\.\d ms\)\nok   migrations: all applied \(newest \d{3}_\w+\.sql\)\n$/,
    );
    const other = await probe(s, '/other');
    expect(other).toEqual({ status: 404, body: 'not found: this port serves /metrics, /healthz and /readyz\n' });

    await proxy.close();
    const down = await probeFails(s, '/readyz');
    expect(down.body.split('\n')[0]).toMatch(
      /^not ready: database: unreachable: .*; migrations: unknown: the database is unreachable$/,
    );
    // Restarting a replica brings no database back: liveness does not follow it. The loop keeps
    // turning (its steps fail fast and end) for longer than the stall threshold.
    await new Promise((r) => setTimeout(r, 1500));
    expect((await probe(s, '/healthz')).status).toBe(200);

    proxy = await startTcpProxy({ host: target.hostname, port: Number(target.port) }, { port: Number(viaProxy.port) });
    try {
      await waitFor('readyz ok again', async () => (await probe(s, '/readyz')).status === 200, 20_000);
      expect((await probe(s, '/healthz')).status).toBe(200);
    } finally {
      await s.stop();
      await proxy.close();
    }
  });

  it('/healthz fails while a step is stuck past the stall threshold, and recovers when it ends', async () => {
    const s = await startServer({ env: { DATABASE_URL: f.db.url }, args: [...PRO, '--replica-id', 'stuck'] });
    servers.push(s);
    await waitFor('it leads', async () =>
      (await fetch(s.metricsUrl).then((r) => r.text())).includes('leoflow_leader{role="auto"} 1'),
    );
    expect((await probe(s, '/healthz')).status).toBe(200);
    // Every step reads the runs: a lock no reader gets past holds the leader's step.
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    const locking = f.db.sql.begin(async (tx) => {
      await tx`lock table dag_runs in access exclusive mode`;
      await held;
    });
    try {
      const stuck = await probeFails(s, '/healthz');
      expect(stuck.body.split('\n')[0]).toMatch(
        /^not live: scheduler_loop: a step has been running for \d+\.\d s \(stall threshold 1\.0 s\)$/,
      );
      // Readiness is not liveness: the database still answers.
      expect((await probe(s, '/readyz')).status).toBe(200);
    } finally {
      release();
      await locking;
    }
    await waitFor('healthz ok again', async () => (await probe(s, '/healthz')).status === 200, 10_000);
    await s.stop();
  });

  it('an observer does not migrate, and is not ready while a migration is missing', async () => {
    const [last] = await f.db.sql<
      { id: number; name: string }[]
    >`select id, name from leoflow_migrations order by id desc limit 1`;
    await f.db.sql`delete from leoflow_migrations where id = ${last!.id}`;
    try {
      const o = await startServer({
        env: { DATABASE_URL: f.db.url },
        args: [...PRO, '--replica-id', 'watcher', '--role', 'observer'],
      });
      servers.push(o);
      const r = await probe(o, '/readyz');
      expect(r.status).toBe(503);
      expect(r.body.split('\n')[0]).toMatch(
        new RegExp(
          `^not ready: migrations: 1 pending: ${last!.name.replace('.', '\\.')} \\(newest \\d{3}_\\w+\\.sql\\)$`,
        ),
      );
      // It wrote nothing: the migration is still unrecorded.
      expect(await f.db.sql`select 1 from leoflow_migrations where id = ${last!.id}`).toHaveLength(0);
      expect((await probe(o, '/healthz')).status).toBe(200);
      await o.stop();
    } finally {
      await f.db.sql`insert into leoflow_migrations (id, name) values (${last!.id}, ${last!.name})`;
    }
  });
});
