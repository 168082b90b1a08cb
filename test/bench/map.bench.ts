import { readFileSync } from 'node:fs';
import { rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { cli, scratchDir, startServer, waitFor } from '../helpers/leoflow-process.js';
import { createTestDatabase } from '../helpers/test-database.js';
import { report } from './report.js';

/**
 * map: a `map:` over N items of `true` on one server (subprocess executor, shipped defaults but for
 * an output size that holds the list). Items/s from the mapped task's expansion (its `ti.expanded`
 * event) to its last mapped instance ended, by the database's timestamps; the expansion's
 * own time; and the server's peak RSS (VmHWM) at the end. A size that has not finished within the
 * window is reported with what it did. LEOFLOW_BENCH_MAP_ITEMS sets the sizes (10000,100000).
 */
const SIZES = (process.env.LEOFLOW_BENCH_MAP_ITEMS ?? '10000,100000').split(',').map(Number);
const WINDOW_MS = Number(process.env.LEOFLOW_BENCH_MAP_WINDOW_MS ?? 240_000);

/** The server's peak resident set so far, in MiB (Linux). */
function peakRssMiB(pid: number): number {
  const m = /VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Math.round(Number(m[1]) / 1024) : NaN;
}

describe('map', () => {
  it('maps 10,000 and 100,000 items of true', async () => {
    const rows: Record<string, string | number>[] = [];
    for (const n of SIZES) {
      const db = await createTestDatabase();
      const tmp = scratchDir('leoflow-map-bench-');
      const s = await startServer({
        args: ['--database-url', db.url, '--max-output-size', '1MiB'],
        quiet: true,
      });
      try {
        const file = path.join(tmp, 'fan.yaml');
        const gen = `seq 0 ${n - 1} | paste -sd, - | sed 's/^/{"items":[/; s/$/]}/' > "$LEOFLOW_OUTPUT"`;
        await writeFile(
          file,
          [
            'dag_id: fan',
            'tasks:',
            '  - id: gen',
            `    command: ${JSON.stringify(gen)}`,
            '  - id: each',
            '    command: ["true"]',
            '    depends_on: [gen]',
            '    map: { over: gen.items }',
            '',
          ].join('\n'),
        );
        expect((await cli(s.url, ['dag', 'apply', file])).code).toBe(0);
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
        const [w] = await db.sql<{ gen_end: Date; made: Date; last: Date; ended: number }[]>`
          select (select ended_at from task_instances where run_id = ${runId} and task_id = 'gen') as gen_end,
                 (select min(at) from events where run_id = ${runId} and kind = 'ti.expanded') as made,
                 max(ended_at) as last,
                 count(*) filter (where state = 'success')::int as ended
          from task_instances where run_id = ${runId} and map_parent is not null`;
        const secs = (w!.last.getTime() - w!.made.getTime()) / 1000;
        rows.push({
          items: n,
          run: done,
          ended: w!.ended,
          start_s: ((w!.made.getTime() - w!.gen_end.getTime()) / 1000).toFixed(1),
          run_s: secs.toFixed(1),
          items_per_s: Math.round(w!.ended / secs),
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
