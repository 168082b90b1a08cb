import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { expect, it } from 'vitest';
import { podName } from '../../src/core/pod-identity.js';
import { proServerForFile } from '../helpers/fake-kube/pro-server-for-file.js';
import { cli, waitFor } from '../helpers/leoflow-process.js';
import { scrapeMetrics } from '../helpers/scrape-metrics.js';

/**
 * A slow API server never slows the tick: 50 task instances dispatched while every request to
 * the API server takes 500 ms. The creates wait in the dispatch pool's 16 drainers; the step's p99
 * stays under 100 ms, and every pod is created once. The same burst at no latency comes first, as
 * the baseline: on a machine loaded enough that the burst's own work (planning 50 task instances,
 * serializing 50 pods) makes a step or two slow, the slow API must add none. The fake's kubelet is
 * manual here: the pods stay pending, so what is measured is the dispatch and not 50 agent
 * processes starting on a two-core machine. A timing bound: it runs in the timing project, after
 * the others (beside them, a loaded CI runner made one of 69 steps slow).
 */

const NS = 'leoflow';
const TASKS = 50;
const LATENCY_MS = 500;
const f = proServerForFile({
  namespace: NS,
  kube: { kubelet: 'manual' },
  // A short tick, so the few seconds of dispatch give enough steps for a p99.
  args: ['--tick-interval', '50ms'],
  tmpPrefix: 'leoflow-kube-slow-',
});

/** Steps observed, and those at most 100 ms, from the tick histogram. */
async function ticks(): Promise<{ all: number; fast: number }> {
  const m = await scrapeMetrics(f.server.metricsUrl);
  return {
    all: m.get('leoflow_tick_duration_seconds_count') ?? 0,
    fast: m.get('leoflow_tick_duration_seconds_bucket{le="0.1"}') ?? 0,
  };
}

/** One run of the wide DAG dispatched at this latency: its steps, the slow ones, its pods. */
async function burst(
  key: string,
  latencyMs: number,
): Promise<{ steps: number; slow: number; tookMs: number; tis: { pod: string; state: string; try_number: number }[] }> {
  f.kube.setLatency(latencyMs);
  const before = await ticks();
  const started = Date.now();
  const r = await cli(f.server.url, ['run', 'trigger', 'wide', '--key', key, '--output', 'json']);
  const runId = (JSON.parse(r.stdout) as { run_id: string }).run_id;
  const tis = await waitFor(
    'every pod created',
    async () => {
      const rows = await f.db.sql<
        { id: string; task_id: string; try_number: number; state: string; attempt_token: string | null }[]
      >`select id, task_id, try_number, state, attempt_token from task_instances where run_id = ${runId}`;
      if (rows.some((t) => t.attempt_token === null)) return null;
      const names = rows.map((t) =>
        podName({
          dagId: 'wide',
          runId,
          taskId: t.task_id,
          tiId: t.id,
          tryNumber: t.try_number,
          attemptToken: t.attempt_token!,
        }),
      );
      return rows.length === TASKS && names.every((n) => f.kube.pod(NS, n) !== undefined)
        ? rows.map((t, i) => ({ ...t, pod: names[i]! }))
        : null;
    },
    60_000,
    100,
  );
  const tookMs = Date.now() - started;
  // A few more ticks while the pods sit pending and their attempts stay queued.
  await new Promise((res) => setTimeout(res, 2_000));
  const after = await ticks();
  const steps = after.all - before.all;
  return { steps, slow: steps - (after.fast - before.fast), tookMs, tis };
}

it(
  `dispatches ${TASKS} task instances at ${LATENCY_MS} ms API latency with the step's p99 under 100 ms, each pod created once`,
  { timeout: 180_000 },
  async () => {
    const file = path.join(f.tmp, 'wide.yaml');
    await writeFile(
      file,
      [
        'dag_id: wide',
        'max_active_runs: 2',
        'tasks:',
        ...Array.from({ length: TASKS }, (_, i) => `  - { id: t${i}, command: ["true"] }`),
        '',
      ].join('\n'),
    );
    expect((await cli(f.server.url, ['dag', 'apply', file])).code).toBe(0);
    const fast = await burst('baseline', 0);
    const creates = f.kube.requests().filter((q) => q.verb === 'create').length;
    const slowApi = await burst('slow', LATENCY_MS);

    expect(slowApi.steps).toBeGreaterThan(50);
    // p99 under 100 ms: at most 1 % of the steps over it; where the machine makes the baseline's
    // steps slow already, no more than the baseline's share of them, with three steps of slack for
    // a machine shared with other work (a dispatch made in the step would make nearly every step of
    // the burst slow, 500 ms each).
    const share = (b: { steps: number; slow: number }) => b.slow / Math.max(1, b.steps);
    const allowed =
      fast.slow <= Math.floor(fast.steps / 100)
        ? Math.floor(slowApi.steps / 100)
        : Math.ceil(share(fast) * slowApi.steps) + 3;
    expect(
      slowApi.slow,
      `at ${LATENCY_MS} ms: ${slowApi.slow} of ${slowApi.steps} steps over 100 ms; at no latency: ${fast.slow} of ${fast.steps}`,
    ).toBeLessThanOrEqual(allowed);
    for (const t of slowApi.tis) expect(f.kube.createCount(NS, t.pod), t.pod).toBe(1);
    expect(f.kube.requests().filter((q) => q.verb === 'create').length - creates).toBe(TASKS);
    expect(slowApi.tis.every((t) => t.state === 'queued' && t.try_number === 1)).toBe(true);
    // 16 drainers at 500 ms a create: about 50 / 16 × 0.5 s.
    expect(slowApi.tookMs).toBeGreaterThan(1_000);
    expect(slowApi.tookMs).toBeLessThan(15_000);
  },
);
