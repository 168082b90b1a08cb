import { randomBytes } from 'node:crypto';
import os from 'node:os';
import { readFile } from 'node:fs/promises';
import { describe, expect, it } from 'vitest';
import { createClients, type Clients } from '../../src/cli/client.js';
import { ROOT, startServer, type ServerProcess } from '../helpers/leoflow-process.js';
import { createTestDatabase, type TestDatabase } from '../helpers/test-database.js';
import { percentile, report } from './report.js';

/**
 * token-auth: what the per-call token lookup costs (issue 25). With API tokens on, every call
 * hashes its bearer token and reads its row from Postgres: there is no cache, so a revocation
 * holds from the next call. Measured: GetDag (one small read of its own) from a client at
 * concurrency 1 (latency) and 16 (calls per second), against two servers of the same flags, one
 * with auth on (an admin token) and one open (`--insecure`), each on its own database, both up at
 * once. Short slices alternate between them (open, token, token, open, …), so a busy machine's
 * drift falls on both alike; each pair of slices gives one ratio.
 */

const PAIRS = Number(process.env.LEOFLOW_BENCH_TOKEN_PAIRS ?? 6);
const SLICE_S = Number(process.env.LEOFLOW_BENCH_TOKEN_SLICE_S ?? 2);
const CONCURRENCY = [1, 16];

interface Slice {
  perSecond: number;
  latencies: number[];
}

/** Calls GetDag from `workers` loops for `seconds`. */
async function hammer(api: Clients, workers: number, seconds: number): Promise<Slice> {
  const until = performance.now() + seconds * 1000;
  const latencies: number[] = [];
  await Promise.all(
    Array.from({ length: workers }, async () => {
      while (performance.now() < until) {
        const t = performance.now();
        await api.workflow.getDag({ dagId: 'hello' });
        latencies.push(performance.now() - t);
      }
    }),
  );
  return { perSecond: latencies.length / seconds, latencies };
}

async function startMode(mode: 'open' | 'token'): Promise<{ api: Clients; server: ServerProcess; db: TestDatabase }> {
  const db = await createTestDatabase();
  const admin = `lf_${randomBytes(32).toString('hex')}`;
  const server = await startServer({
    quiet: true,
    env: { DATABASE_URL: db.url, LEOFLOW_INSECURE: mode === 'open' ? 'true' : undefined, LEOFLOW_TOKEN: undefined },
    args: [
      '--edition',
      'pro',
      '--executor',
      'subprocess',
      ...(mode === 'token' ? ['--bootstrap-admin-token', admin] : []),
    ],
  });
  const api = createClients(server.url, null, mode === 'token' ? admin : null);
  await api.workflow.applyDag({
    source: await readFile(`${ROOT}/examples/hello.yaml`, 'utf8'),
    filename: 'hello.yaml',
  });
  // Fair only if the one really checks tokens and the other really is open.
  if (mode === 'token')
    await expect(createClients(server.url).workflow.getDag({ dagId: 'hello' })).rejects.toThrow(/unauthenticated/i);
  else await createClients(server.url).workflow.getDag({ dagId: 'hello' });
  return { api, server, db };
}

const median = (xs: number[]) => percentile(xs, 50);

describe('token-auth', () => {
  it('measures API calls with a bearer token against an open API, alternating', async () => {
    const loadBefore = os.loadavg();
    const open = await startMode('open');
    const token = await startMode('token');
    try {
      for (const m of [open, token]) await hammer(m.api, 4, 1); // warm-up: connections, JIT, caches
      const rows: Record<string, string | number>[] = [];
      for (const c of CONCURRENCY) {
        const ratios: number[] = [];
        const all = { open: [] as Slice[], token: [] as Slice[] };
        for (let i = 0; i < PAIRS; i++) {
          const order = i % 2 === 0 ? (['open', 'token'] as const) : (['token', 'open'] as const);
          const got: Partial<Record<'open' | 'token', Slice>> = {};
          for (const mode of order) got[mode] = await hammer(mode === 'open' ? open.api : token.api, c, SLICE_S);
          all.open.push(got.open!);
          all.token.push(got.token!);
          ratios.push(got.token!.perSecond / got.open!.perSecond);
        }
        const lat = (s: Slice[], p: number) =>
          +percentile(
            s.flatMap((x) => x.latencies),
            p,
          ).toFixed(2);
        rows.push({
          concurrency: c,
          open_calls_s: Math.round(median(all.open.map((s) => s.perSecond))),
          token_calls_s: Math.round(median(all.token.map((s) => s.perSecond))),
          token_over_open_median: +median(ratios).toFixed(2),
          ratio_min: +Math.min(...ratios).toFixed(2),
          ratio_max: +Math.max(...ratios).toFixed(2),
          open_p50_ms: lat(all.open, 50),
          token_p50_ms: lat(all.token, 50),
          open_p99_ms: lat(all.open, 99),
          token_p99_ms: lat(all.token, 99),
        });
      }
      await report('token-auth', rows, {
        loadavgBefore: loadBefore,
        loadavgAfter: os.loadavg(),
        pairs: PAIRS,
        sliceSeconds: SLICE_S,
      });
      process.stdout.write(
        `load average before ${loadBefore.map((l) => l.toFixed(2)).join(' ')}, after ${os
          .loadavg()
          .map((l) => l.toFixed(2))
          .join(' ')}\n`,
      );
    } finally {
      for (const m of [open, token]) {
        await m.server.stop();
        await m.db.drop();
      }
    }
  });
});
