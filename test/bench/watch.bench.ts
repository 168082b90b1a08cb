import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { createClients } from '../../src/cli/client.js';
import { cli, startServer } from '../helpers/leoflow-process.js';
import { createTestDatabase } from '../helpers/test-database.js';
import { percentile, report } from './report.js';

/**
 * watch: how long an event takes from its commit to a WatchRun stream (a real server, its one
 * LISTEN and its feed). Events are written to a run of a paused DAG one transaction at a time,
 * LEOFLOW_BENCH_WATCH_GAP_MS apart; each one's latency is from just before its insert (autocommit,
 * so the commit is in it) to its arrival at the client, by the same clock.
 *
 *   npx vitest run --config test/bench/vitest.config.ts test/bench/watch.bench.ts
 *
 * LEOFLOW_BENCH_WATCH_EVENTS (300), LEOFLOW_BENCH_WATCH_GAP_MS (10), LEOFLOW_BENCH_WATCH_WATCHERS (1).
 */

const N = Number(process.env.LEOFLOW_BENCH_WATCH_EVENTS ?? 300);
const GAP_MS = Number(process.env.LEOFLOW_BENCH_WATCH_GAP_MS ?? 10);
const WATCHERS = Number(process.env.LEOFLOW_BENCH_WATCH_WATCHERS ?? 1);

describe('watch', () => {
  it('WatchRun event latency, commit to client', async () => {
    const db = await createTestDatabase();
    const tmp = await mkdtemp(path.join(os.tmpdir(), 'leoflow-bench-watch-'));
    const server = await startServer({ env: { DATABASE_URL: db.url } });
    try {
      await writeFile(path.join(tmp, 'idle.yaml'), 'dag_id: idle\ntasks:\n  - id: a\n    command: ["true"]\n');
      expect((await cli(server.url, ['dag', 'apply', path.join(tmp, 'idle.yaml')])).code).toBe(0);
      expect((await cli(server.url, ['dag', 'pause', 'idle'])).code).toBe(0);
      const api = createClients(server.url);
      const { run } = await api.workflow.triggerRun({ dagId: 'idle', confJson: '', runKey: '' });
      const runId = run!.runId;
      const sentAt = new Map<number, number>();
      const latencies: number[][] = Array.from({ length: WATCHERS }, () => []);
      const ac = new AbortController();
      const readers = latencies.map(async (out) => {
        try {
          for await (const res of api.workflow.watchRun(
            { runId, afterSeq: '0', follow: true },
            { signal: ac.signal },
          )) {
            const now = performance.now();
            for (const e of res.events) {
              const i = JSON.parse(e.payloadJson).bench as number | undefined;
              if (i !== undefined) out.push(now - sentAt.get(i)!);
            }
            if (out.length >= N) return;
          }
        } catch {
          // aborted at the end
        }
      });
      await new Promise((r) => setTimeout(r, 500));
      for (let i = 0; i < N; i++) {
        sentAt.set(i, performance.now());
        await db.sql`insert into events (run_id, kind, payload) values (${runId}, 'bench', ${db.sql.json({ bench: i })})`;
        await new Promise((r) => setTimeout(r, GAP_MS));
      }
      await Promise.race([Promise.all(readers), new Promise((r) => setTimeout(r, 10_000))]);
      ac.abort();
      const all = latencies.flat();
      expect(all.length).toBe(N * WATCHERS);
      await report('watch', [
        {
          events: N,
          watchers: WATCHERS,
          gap_ms: GAP_MS,
          p50_ms: percentile(all, 50).toFixed(1),
          p99_ms: percentile(all, 99).toFixed(1),
          max_ms: Math.max(...all).toFixed(1),
        },
      ]);
    } finally {
      await server.stop();
      await db.drop();
      await rm(tmp, { recursive: true, force: true });
    }
  }, 120_000);
});
