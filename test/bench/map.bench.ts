import { readFileSync } from 'node:fs';
import { rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { cli, scratchDir, startServer, waitFor } from '../helpers/leoflow-process.js';
import { createTestDatabase } from '../helpers/test-database.js';
import { report } from './report.js';
import { bucketPercentile, steps } from './tick-steps.js';

/**
 * map: a `map:` over N items of `true` on one server (subprocess executor, shipped defaults but for
 * an output size that holds the list), and, for the sizes a DAG may have, a static DAG of the same
 * width (N tasks of `true` after the same `gen`): what an item costs against what a task costs.
 * Items/s from `gen`'s end to the last item's (or task's) end, by the database's timestamps; the
 * expansion's own time; and the server's peak RSS (VmHWM) at the end. A size that has not finished
 * within the window is reported with what it did. The scheduler's steps meanwhile: their count and
 * p50/p99 (`leoflow_tick_duration_seconds`' buckets, each an upper bound). LEOFLOW_BENCH_MAP_ITEMS sets the map's sizes
 * (1000,10000,100000), LEOFLOW_BENCH_MAP_STATIC the static DAG's (1000; at most 10,000 tasks a DAG).
 */
const SIZES = (process.env.LEOFLOW_BENCH_MAP_ITEMS ?? '1000,10000,100000').split(',').map(Number);
const STATIC_SIZES = (process.env.LEOFLOW_BENCH_MAP_STATIC ?? '1000').split(',').filter(Boolean).map(Number);
const WINDOW_MS = Number(process.env.LEOFLOW_BENCH_MAP_WINDOW_MS ?? 240_000);

/** The server's peak resident set so far, in MiB (Linux). */
function peakRssMiB(pid: number): number {
  const m = /VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Math.round(Number(m[1]) / 1024) : NaN;
}

/** `gen` writes {"items": [0 … n−1]}; then one mapped task over it, or n static tasks after it. */
function fanDag(kind: 'map' | 'static', n: number): string {
  const gen = `seq 0 ${n - 1} | paste -sd, - | sed 's/^/{"items":[/; s/$/]}/' > "$LEOFLOW_OUTPUT"`;
  const head = ['dag_id: fan', 'tasks:', '  - id: gen', `    command: ${JSON.stringify(gen)}`];
  if (kind === 'map')
    return [
      ...head,
      '  - id: each',
      '    command: ["true"]',
      '    depends_on: [gen]',
      '    map: { over: gen.items }',
      '',
    ].join('\n');
  const tasks = Array.from({ length: n }, (_, i) => `  - { id: s${i}, command: ["true"], depends_on: [gen] }`);
  return [...head, ...tasks, ''].join('\n');
}

describe('map', () => {
  it('maps 1,000, 10,000 and 100,000 items of true, against a static DAG as wide', async () => {
    const rows: Record<string, string | number>[] = [];
    const cases = [
      ...STATIC_SIZES.map((n) => ({ kind: 'static' as const, n })),
      ...SIZES.map((n) => ({ kind: 'map' as const, n })),
    ];
    for (const { kind, n } of cases) {
      const db = await createTestDatabase();
      const tmp = scratchDir('leoflow-map-bench-');
      const s = await startServer({
        args: ['--database-url', db.url, '--max-output-size', '1MiB'],
        quiet: true,
      });
      try {
        const file = path.join(tmp, 'fan.yaml');
        await writeFile(file, fanDag(kind, n));
        expect((await cli(s.url, ['dag', 'apply', file])).code).toBe(0);
        const before = await steps(s);
        const t = await cli(s.url, ['run', 'trigger', 'fan', '-o', 'json']);
        expect(t.code, t.stderr).toBe(0);
        const runId = JSON.parse(t.stdout).run_id as string;
        const load = readFileSync('/proc/loadavg', 'utf8').split(' ')[0]!;
        const done = await waitFor(
          `${n} items`,
          async () => {
            const [r] = await db.sql<{ state: string }[]>`select state from dag_runs where id = ${runId}`;
            return r!.state !== 'running' && r!.state !== 'queued' ? r!.state : null;
          },
          WINDOW_MS,
          500,
        ).catch(() => 'unfinished');
        const after = await steps(s);
        const [w] = await db.sql<{ gen_end: Date; made: Date | null; last: Date; ended: number }[]>`
          select (select ended_at from task_instances where run_id = ${runId} and task_id = 'gen') as gen_end,
                 (select min(at) from events where run_id = ${runId} and kind = 'ti.expanded') as made,
                 max(ended_at) as last,
                 count(*) filter (where state = 'success')::int as ended
          from task_instances where run_id = ${runId} and task_id <> 'gen' and map_count is null`;
        const secs = (w!.last.getTime() - w!.gen_end.getTime()) / 1000;
        rows.push({
          kind,
          items: n,
          run: done,
          ended: w!.ended,
          expand_s: w!.made ? ((w!.made.getTime() - w!.gen_end.getTime()) / 1000).toFixed(1) : '-',
          run_s: secs.toFixed(1),
          items_per_s: Math.round(w!.ended / secs),
          steps: after.count - before.count,
          step_p50_ms: bucketPercentile(before, after, 50),
          step_p99_ms: bucketPercentile(before, after, 99),
          rss_peak_mib: peakRssMiB(s.child.pid!),
          load_at_start: load,
        });
        if (done === 'unfinished') await cli(s.url, ['run', 'cancel', runId]);
      } finally {
        await s.stop(15_000);
        await db.drop();
        await rm(tmp, { recursive: true, force: true });
      }
    }
    await report('map', rows);
  });
});
