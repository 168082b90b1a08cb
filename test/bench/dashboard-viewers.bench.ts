import { readFile, readdir } from 'node:fs/promises';
import path from 'node:path';
import { gzipSync } from 'node:zlib';
import { describe, expect, it } from 'vitest';
import { createClients } from '../../src/cli/client.js';
import { ROOT, cli, startServer } from '../helpers/leoflow-process.js';
import { createTestDatabase } from '../helpers/test-database.js';
import { STATS_IDLE_FLUSH_MS, sleep, xacts } from './pg-xacts.js';
import { report } from './report.js';

/**
 * dashboard-viewers: Postgres transactions per second while 1 or 200 dashboards watch one run
 * (WatchRun from seq 0, follow; measured once each has had its replay) and events arrive at ~20/s,
 * the inserts' own transactions taken out; and the dashboard's gzipped bundle (dist/ui, so run `npm run build` first).
 *
 *   npx vitest run --config test/bench/vitest.config.ts test/bench/dashboard-viewers.bench.ts
 */

const WINDOW_MS = 10_000;
const EVENT_GAP_MS = 50;

describe('dashboard-viewers', () => {
  it('statements per second with 1 and 200 viewers of one run; bundle size', async () => {
    const rows: Record<string, string | number>[] = [];
    for (const viewers of [1, 200]) {
      const db = await createTestDatabase();
      const server = await startServer({ env: { DATABASE_URL: db.url } });
      const ac = new AbortController();
      try {
        const api = createClients(server.url);
        await api.workflow.applyDag({
          source: 'dag_id: idle\ntasks:\n  - id: a\n    command: ["true"]\n',
          filename: 'i.yaml',
        });
        expect((await cli(server.url, ['dag', 'pause', 'idle'])).code).toBe(0);
        const { run } = await api.workflow.triggerRun({ dagId: 'idle' });
        const runId = run!.runId;
        let received = 0;
        let joined = 0;
        for (let v = 0; v < viewers; v++) {
          void (async () => {
            let first = true;
            try {
              for await (const res of api.workflow.watchRun(
                { runId, afterSeq: '0', follow: true },
                { signal: ac.signal },
              )) {
                received += res.events.length;
                if (first) joined++;
                first = false;
              }
            } catch {
              // aborted at the end
            }
          })();
        }
        // Each viewer's start (the run's states, its replay from seq 0) is one read of its own: the
        // window measures what watching costs once every viewer has its replay, not the joining.
        const joinedBy = Date.now() + 60_000;
        while (joined < viewers && Date.now() < joinedBy) await sleep(50);
        expect(joined).toBe(viewers);
        await sleep(STATS_IDLE_FLUSH_MS);
        const before = await xacts(db.sql, db.name);
        const started = Date.now();
        let inserted = 0;
        while (Date.now() - started < WINDOW_MS) {
          await db.sql`insert into events (run_id, kind, payload) values (${runId}, 'bench', ${db.sql.json({ i: inserted })})`;
          inserted++;
          await sleep(EVENT_GAP_MS);
        }
        const seconds = (Date.now() - started) / 1000;
        await sleep(STATS_IDLE_FLUSH_MS);
        // The two readings and the inserts are this bench's, not the viewers'.
        const serverXacts = (await xacts(db.sql, db.name)) - before - inserted - 1;
        rows.push({
          viewers,
          events: inserted,
          events_received: received,
          server_xacts_per_s: (serverXacts / seconds).toFixed(1),
        });
      } finally {
        ac.abort();
        await server.stop();
        await db.drop();
      }
    }
    const assets = path.join(ROOT, 'dist/ui/assets');
    let gz = 0;
    let raw = 0;
    for (const name of await readdir(assets)) {
      const bytes = await readFile(path.join(assets, name));
      raw += bytes.length;
      gz += gzipSync(bytes).length;
    }
    await report('dashboard-viewers', rows);
    await report('dashboard-bundle', [{ bundle_kb: (raw / 1024).toFixed(1), bundle_gzip_kb: (gz / 1024).toFixed(1) }]);
  }, 180_000);
});
