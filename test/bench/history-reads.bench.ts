import { describe, expect, it } from 'vitest';
import { getRunView, listRuns } from '../../src/db/runs.js';
import { readRunLogs } from '../../src/db/logs.js';
import { listTiViews, runAndTiStates } from '../../src/db/tis.js';
import type { Sql } from '../../src/db/sql.js';
import { bulkPastRuns } from '../helpers/history-fixtures.js';
import { createTestDatabase } from '../helpers/test-database.js';
import { report } from './report.js';

/**
 * history-reads: what a year of history costs the API's reads. The reads GetRun, ListRuns,
 * ListTaskInstances and TailLogs make (the same functions, on the harness's clock, driver parsing
 * included), on a small database (one DAG, a few runs) and again after 1 M task instances of
 * finished history are added with SQL (100,000 runs of 10 tasks over a year: 3 events and 3 log
 * lines a task, an event a run), then ANALYZE. p50 and p99 of REPS calls each; ratios to the small database.
 */

const RUNS = Number(process.env.LEOFLOW_BENCH_HISTORY_RUNS ?? 100_000);
const TIS_PER_RUN = 10;
const REPS = 300;

type Read = [name: string, fn: () => Promise<unknown>];

function reads(sql: Sql, runId: string, dagId: string): Read[] {
  return [
    ['GetRun (run and its task instances)', () => Promise.all([getRunView(sql, runId), listTiViews(sql, runId)])],
    ['ListRuns, all DAGs, first page of 50', () => listRuns(sql, { limit: 50 })],
    [`ListRuns, DAG ${dagId}, first page of 50`, () => listRuns(sql, { dagId, limit: 50 })],
    ['ListTaskInstances of a run', () => listTiViews(sql, runId)],
    [
      'TailLogs, first page of a run (states, then up to 1,000 lines)',
      async () => {
        await runAndTiStates(sql, runId);
        return readRunLogs(sql, { runId, after: new Map(), limit: 1000 });
      },
    ],
  ];
}

async function measure(fn: () => Promise<unknown>): Promise<{ p50: number; p99: number }> {
  for (let i = 0; i < 20; i++) await fn();
  const ms: number[] = [];
  for (let i = 0; i < REPS; i++) {
    const t0 = performance.now();
    await fn();
    ms.push(performance.now() - t0);
  }
  ms.sort((a, b) => a - b);
  const at = (q: number) => Math.round(ms[Math.min(ms.length - 1, Math.floor(q * ms.length))]! * 1000) / 1000;
  return { p50: at(0.5), p99: at(0.99) };
}

describe('history-reads', () => {
  it('API reads with 1 M task instances of history, as ratios to a small database', async () => {
    const db = await createTestDatabase();
    try {
      // The small database: 20 runs of the DAG read below, one of them the run read.
      await bulkPastRuns(db.sql, { dagId: 'recent', runs: 20, tisPerRun: TIS_PER_RUN, daysBack: 1 });
      await db.sql`analyze`;
      const [run] = await db.sql<
        { id: string }[]
      >`select id::text from dag_runs where dag_id = 'recent' order by id desc limit 1`;
      const list = reads(db.sql, run!.id, 'recent');
      const small = new Map<string, { p50: number; p99: number }>();
      for (const [name, fn] of list) small.set(name, await measure(fn));

      const t0 = performance.now();
      await bulkPastRuns(db.sql, { dagId: 'year', runs: RUNS, tisPerRun: TIS_PER_RUN, daysBack: 365 });
      await db.sql`vacuum analyze`;
      const loadS = (performance.now() - t0) / 1000;
      const [sizes] = await db.sql<{ tis: number; events: number; logs: number }[]>`
        select (select count(*) from task_instances)::int as tis, (select count(*) from events)::int as events,
          (select count(*) from task_logs)::int as logs`;
      expect(sizes!.tis).toBe((RUNS + 20) * TIS_PER_RUN);

      const rows: Record<string, string | number>[] = [];
      for (const [name, fn] of list) {
        const big = await measure(fn);
        const s = small.get(name)!;
        rows.push({
          read: name,
          'small p50 ms': s.p50,
          'small p99 ms': s.p99,
          'history p50 ms': big.p50,
          'history p99 ms': big.p99,
          'p50 ratio': Math.round((big.p50 / s.p50) * 100) / 100,
          'p99 ratio': Math.round((big.p99 / s.p99) * 100) / 100,
        });
      }
      await report('history-reads', rows, {
        runs: RUNS,
        taskInstances: sizes!.tis,
        events: sizes!.events,
        logLines: sizes!.logs,
        loadSeconds: Math.round(loadS),
        reps: REPS,
      });
    } finally {
      await db.drop();
    }
  }, 1_800_000);
});
