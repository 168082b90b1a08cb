import os from 'node:os';
import type { Browser } from 'playwright-core';
import { describe, expect, it } from 'vitest';
import { launchBrowser } from '../helpers/browser.js';
import { startServer } from '../helpers/leoflow-process.js';
import { createTestDatabase } from '../helpers/test-database.js';
import { wideDagSource } from '../helpers/wide-dag.js';
import { createClients } from '../../src/cli/client.js';
import { percentile, report } from './report.js';

/**
 * dashboard-first-load: from navigating a new browser page (its own context: no cache) to a run's
 * page of 500 tasks to all 500 nodes and their edges drawn, in Debian's Chromium, headless. The run is paused, so
 * the time is the page's, not the work's. Issue 39 asks for under a second on this machine.
 *
 *   npm run build && npx vitest run --config test/bench/vitest.config.ts test/bench/dashboard-first-load.bench.ts
 */

const TASKS = 500;
const LOADS = 5;

describe('dashboard-first-load', () => {
  it(`a ${TASKS}-task run's page drawn, ${LOADS} first loads`, async () => {
    const db = await createTestDatabase();
    const server = await startServer({ env: { DATABASE_URL: db.url } });
    let browser: Browser | undefined;
    try {
      const api = createClients(server.url);
      await api.workflow.applyDag({ source: wideDagSource('wide', TASKS), filename: 'wide.yaml' });
      await api.workflow.pauseDag({ dagId: 'wide', paused: true });
      const { run } = await api.workflow.triggerRun({ dagId: 'wide' });
      browser = await launchBrowser();
      const cold: number[] = [];
      const warm: number[] = [];
      const splits: { script: number; api: number; drawn: number }[] = [];
      // Each API call of a cold load, by method: when it left and when its answer was in, and its size.
      const calls = new Map<string, { start: number[]; end: number[]; bytes: number[] }>();
      for (let i = 0; i < LOADS; i++) {
        // Cold: a new context, nothing cached. Warm: the same page loaded again, its assets cached.
        const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
        const page = await context.newPage();
        for (const into of [cold, warm]) {
          const started = performance.now();
          await page.goto(`${server.url}/runs/${run!.runId}`);
          // Counted in the page at each frame, not over the driver's wire.
          // Drawn: every box, and the edges between them (the DAG has some), not boxes alone.
          const drawn = `document.querySelectorAll('g.node').length === ${TASKS}`;
          await page.waitForFunction(`${drawn} && document.querySelectorAll('polyline.edge').length > 0`, undefined, {
            polling: 'raf',
            timeout: 20_000,
          });
          into.push(performance.now() - started);
          // Where the page's time went, by its own clock from the navigation's start: its script
          // fetched, the API's answers in (the last before the draw), and the 500 nodes drawn.
          // A string: this file is compiled without the DOM's types.
          const split = (await page.evaluate(`(() => {
            const res = performance.getEntriesByType('resource');
            const end = (pick) => Math.max(0, ...res.filter(pick).map((r) => r.responseEnd));
            return {
              script: end((r) => r.initiatorType === 'script' || r.name.endsWith('.js')),
              api: end((r) => r.name.includes('/leoflow.v1.') && r.initiatorType === 'fetch'),
              drawn: performance.now(),
              calls: res
                .filter((r) => r.name.includes('/leoflow.v1.') && r.initiatorType === 'fetch')
                .map((r) => ({ method: r.name.split('/').pop(), start: r.startTime, end: r.responseEnd,
                  bytes: r.encodedBodySize })),
            };
          })()`)) as {
            script: number;
            api: number;
            drawn: number;
            calls: { method: string; start: number; end: number; bytes: number }[];
          };
          if (into !== cold) continue;
          splits.push(split);
          for (const c of split.calls) {
            const m = calls.get(c.method) ?? { start: [], end: [], bytes: [] };
            m.start.push(c.start);
            // A stream still open has no end yet (0).
            if (c.end > 0) m.end.push(c.end);
            m.bytes.push(c.bytes);
            calls.set(c.method, m);
          }
        }
        await context.close();
      }
      expect(cold.length).toBe(LOADS);
      const row = (cache: string, times: number[]) => ({
        cache,
        tasks: TASKS,
        loads: LOADS,
        p50_ms: percentile(times, 50).toFixed(0),
        min_ms: Math.min(...times).toFixed(0),
        max_ms: Math.max(...times).toFixed(0),
      });
      const mid = (k: 'script' | 'api' | 'drawn') =>
        percentile(
          splits.map((x) => x[k]),
          50,
        ).toFixed(0);
      // The machine's load, as the figures depend on it (2 cores shared).
      await report('dashboard-first-load', [row('cold', cold), row('warm', warm)], { loadavg: os.loadavg() });
      // The cold loads' median split (the API's answers include WatchRun's first message).
      await report('dashboard-first-load-split', [
        { script_ms: mid('script'), api_ms: mid('api'), drawn_ms: mid('drawn') },
      ]);
      await report(
        'dashboard-first-load-calls',
        [...calls].map(([method, c]) => ({
          method,
          per_load: (c.start.length / LOADS).toFixed(1),
          start_ms: percentile(c.start, 50).toFixed(0),
          end_ms: c.end.length ? percentile(c.end, 50).toFixed(0) : 'open',
          bytes: percentile(c.bytes, 50),
        })),
      );
    } finally {
      await browser?.close();
      await server.stop();
      await db.drop();
    }
  }, 180_000);
});
