import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import pino from 'pino';
import { describe, expect, it } from 'vitest';
import { createClients } from '../../src/cli/client.js';
import type { Sql } from '../../src/db/sql.js';
import { removeRuns } from '../../src/db/history/remove-runs.js';
import { createHistoryRound, type HistoryKeeperCounters } from '../../src/scheduler/history-round.js';
import { cleanHistory } from '../../src/server/api/clean-history.js';
import { cli, startServer, waitFor, type ServerProcess } from '../helpers/leoflow-process.js';
import { createTestDatabase, type TestDatabase } from '../helpers/test-database.js';
import { round } from './pg-xacts.js';
import { report } from './report.js';

/**
 * retention: what a task costs on disk, and what it costs to remove a day of history.
 *
 * A typical DAG (10 tasks: extract, 8 transforms after it, load after them; each prints 5 lines
 * of about 40 bytes) runs 20 times through the real server (subprocess executor). Its last run's
 * rows — run, task instances, events, log lines — are then copied with SQL into 4 days of history
 * of RUNS_PER_DAY runs each (new ids, times spread over the day), every day in partitions of its
 * own as the history keeper makes them (about a day of ids each).
 *
 * Bytes per task: each table's growth for one generated day (heap, indexes, TOAST), over the
 * day's tasks. Rows are copied as written once: a live task instance, updated five times in its
 * life, also leaves dead versions behind until vacuum.
 *
 * Removing a day, two ways, each on days of their own, alternating (days 1 and 3, then 2 and 4):
 * - retention: the history keeper's rounds (runs and task instances deleted a batch per round,
 *   the day's events and task_logs partitions dropped);
 * - db clean: `cleanHistory` (the same runs and task instances, and every event and log line of
 *   theirs deleted row by row).
 * For each: wall time, WAL written (pg_current_wal_lsn), and data pages written (a CHECKPOINT
 * before and after; the checkpointer's count of buffers written), then the same for the VACUUM
 * each leaves to do (a DELETE's dead rows are removed by vacuum, which writes them again). Needs
 * a Postgres of its own (the bench's embedded one, not TEST_DATABASE_URL's shared server), since
 * WAL and checkpoints are the whole server's.
 */

const RUNS_PER_DAY = Number(process.env.LEOFLOW_BENCH_RETENTION_RUNS_PER_DAY ?? 5000);
const TEMPLATE_RUNS = 20;
const TASKS = 10;
const LINES = 5;
const DAYS = 4;
const DAY_MS = 86_400_000;
/** Ids of day d's runs start at RUN_BASE·d, its task instances' at TI_BASE·d. */
const RUN_BASE = 1_000_000;
const TI_BASE = 10_000_000;
/** The issue's sustained load, for the per-day extrapolation. */
const TASKS_PER_SECOND = 100;

function typicalDag(): string {
  const lines = `for i in 1 2 3 4 5; do echo "$LEOFLOW_TASK_ID: batch $i of ${LINES}, 10000 rows"; done`;
  const out = ['dag_id: typical', 'max_active_runs: 4', 'tasks:', `  - id: extract`, `    command: '${lines}'`];
  for (let i = 1; i <= TASKS - 2; i++)
    out.push(`  - id: transform_${i}`, `    depends_on: [extract]`, `    command: '${lines}'`);
  out.push(
    `  - id: load`,
    `    depends_on: [${Array.from({ length: TASKS - 2 }, (_, i) => `transform_${i + 1}`).join(', ')}]`,
    `    command: '${lines}'`,
  );
  return out.join('\n') + '\n';
}

/** The history keeper's counters, all ignored but its errors, which go into `errors`. */
function errorsOnly(errors: unknown[]): HistoryKeeperCounters {
  const ignore = () => {};
  return {
    runsRemoved: ignore,
    partitionAdded: ignore,
    partitionDropped: ignore,
    rowsSwept: ignore,
    agentsForgotten: ignore,
    error: (err) => errors.push(err),
  };
}

/** When day d (1…DAYS) begins: the last day ends a day before `now`. */
const dayStart = (now: Date, d: number) => new Date(now.getTime() - (DAYS + 2 - d) * DAY_MS);

/** Copies run `template` (its rows in every table) into RUNS_PER_DAY runs spread over day d. */
async function generateDay(sql: Sql, template: string, d: number, start: Date): Promise<void> {
  const runBase = RUN_BASE * d;
  const tiBase = TI_BASE * d;
  const step = DAY_MS / RUNS_PER_DAY;
  const n = RUNS_PER_DAY;
  await sql.begin(async (tx) => {
    await tx`create temporary table shift on commit drop as
      select g, ${start}::timestamptz + g * ${step} * interval '1 millisecond' - (select created_at from dag_runs where id = ${template}) as by
      from generate_series(0, ${n - 1}) g`;
    await tx`create temporary table tmpl_ti on commit drop as
      select *, row_number() over (order by id) - 1 as k from task_instances where run_id = ${template}`;
    await tx`
      insert into dag_runs (id, dag_id, run_key, run_type, dag_version, logical_date, state, conf, created_at, started_at, ended_at, settled_at, plan_epoch)
      overriding system value
      select ${runBase} + s.g, r.dag_id, 'day' || ${d} || '_' || s.g, r.run_type, r.dag_version, r.logical_date + s.by, r.state, r.conf,
        r.created_at + s.by, r.started_at + s.by, r.ended_at + s.by, r.settled_at + s.by, 0
      from dag_runs r, shift s where r.id = ${template}`;
    await tx`
      insert into task_instances (id, run_id, task_id, try_number, max_tries, state, attempt_token, executor, agent_id, dispatch_key,
        retry_delay_ms, max_retry_delay_ms, pid, pending_reason, next_try_at, queued_at, started_at, heartbeat_at, ended_at, exit_code, error, delivered_to, timeout_ms)
      overriding system value
      select ${tiBase} + s.g * ${TASKS} + t.k, ${runBase} + s.g, t.task_id, t.try_number, t.max_tries, t.state, gen_random_uuid(), t.executor, t.agent_id, t.dispatch_key,
        t.retry_delay_ms, t.max_retry_delay_ms, t.pid, t.pending_reason, t.next_try_at + s.by, t.queued_at + s.by, t.started_at + s.by, t.heartbeat_at + s.by,
        t.ended_at + s.by, t.exit_code, t.error, t.delivered_to, t.timeout_ms
      from tmpl_ti t, shift s`;
    await tx`
      insert into events (run_id, ti_id, kind, payload, at)
      select ${runBase} + s.g, case when e.ti_id is null then null else ${tiBase} + s.g * ${TASKS} + t.k end, e.kind, e.payload, e.at + s.by
      from events e left join tmpl_ti t on t.id = e.ti_id, shift s
      where e.run_id = ${template}
      order by s.g, e.seq`;
    await tx`
      insert into task_logs (ti_id, try_number, seq, stream, line, at)
      select ${tiBase} + s.g * ${TASKS} + t.k, l.try_number, l.seq, l.stream, l.line, l.at + s.by
      from task_logs l join tmpl_ti t on t.id = l.ti_id, shift s`;
  });
}

interface Size {
  heap: number;
  indexes: number;
  toast: number;
}

/** Heap, index and TOAST bytes of a table, its partitions summed (or of the relations named). */
async function sizeOf(sql: Sql, rels: string[]): Promise<Size> {
  const [row] = await sql<{ heap: string; indexes: string; toast: string }[]>`
    select coalesce(sum(pg_relation_size(c.oid)), 0)::text as heap, coalesce(sum(pg_indexes_size(c.oid)), 0)::text as indexes,
      coalesce(sum(case when c.reltoastrelid = 0 then 0 else pg_total_relation_size(c.reltoastrelid) end), 0)::text as toast
    from pg_class c where c.oid in (
      select x::regclass from unnest(${rels}::text[]) x where (select relkind from pg_class where oid = x::regclass) = 'r'
      union all
      select t.relid from unnest(${rels}::text[]) x, lateral pg_partition_tree(x::regclass) t where t.isleaf)`;
  return { heap: Number(row!.heap), indexes: Number(row!.indexes), toast: Number(row!.toast) };
}

/** Data pages the checkpointer has written so far (PostgreSQL 17 moved the count to pg_stat_checkpointer). */
async function pagesWritten(sql: Sql): Promise<number> {
  try {
    const [r] = await sql<{ n: string }[]>`select buffers_written::text as n from pg_stat_checkpointer`;
    return Number(r!.n);
  } catch {
    const [r] = await sql<{ n: string }[]>`select buffers_checkpoint::text as n from pg_stat_bgwriter`;
    return Number(r!.n);
  }
}

interface Cost {
  ms: number;
  walBytes: number;
  pages: number;
}

/** Wall time, WAL and data pages written by `op`, from a checkpoint to a checkpoint. */
async function measure(sql: Sql, op: () => Promise<unknown>): Promise<Cost> {
  await sql`checkpoint`;
  const [a] = await sql<{ lsn: string }[]>`select pg_current_wal_lsn()::text as lsn`;
  const pages = await pagesWritten(sql);
  const started = performance.now();
  await op();
  const ms = performance.now() - started;
  const [w] = await sql<
    { bytes: string }[]
  >`select pg_wal_lsn_diff(pg_current_wal_lsn(), ${a!.lsn}::pg_lsn)::text as bytes`;
  await sql`checkpoint`;
  await new Promise((r) => setTimeout(r, 200));
  return { ms, walBytes: Number(w!.bytes), pages: (await pagesWritten(sql)) - pages };
}

const MB = (b: number) => round(b / 2 ** 20, 2);

describe('retention', () => {
  it('measures bytes per task on disk and the cost of removing a day of history', async () => {
    const db: TestDatabase = await createTestDatabase();
    const tmp = await mkdtemp(path.join(os.tmpdir(), 'leoflow-bench-retention-'));
    let s: ServerProcess | null = null;
    try {
      const { sql } = db;
      await writeFile(path.join(tmp, 'typical.yaml'), typicalDag());
      s = await startServer({
        env: { DATABASE_URL: db.url },
        args: ['--dispatch-workers', '4', '--dispatch-queue', '16', '--retention', 'off'],
        quiet: true,
      });
      expect((await cli(s.url, ['dag', 'apply', tmp])).code).toBe(0);
      const api = createClients(s.url);
      const ids: string[] = [];
      for (let i = 0; i < TEMPLATE_RUNS; i++)
        ids.push((await api.workflow.triggerRun({ dagId: 'typical' })).run!.runId);
      await waitFor(
        'the typical runs to end',
        async () => {
          const [r] = await sql<{ n: number; bad: number }[]>`
          select count(*) filter (where state = 'success')::int as n, count(*) filter (where state in ('failed', 'cancelled'))::int as bad from dag_runs where id = any(${ids}::bigint[])`;
          if (r!.bad > 0) throw new Error('a typical run failed');
          return r!.n === TEMPLATE_RUNS;
        },
        120_000,
        200,
      );
      await s.stop();
      s = null;
      const template = ids.at(-1)!;
      const [shape] = await sql<{ tis: number; events: number; lines: number }[]>`
        select (select count(*) from task_instances where run_id = ${template})::int as tis,
          (select count(*) from events where run_id = ${template})::int as events,
          (select count(*) from task_logs where ti_id in (select id from task_instances where run_id = ${template}))::int as lines`;
      expect(shape!.tis).toBe(TASKS);

      // Four days of history, each in partitions of its own, as the keeper lays them out.
      const now = new Date();
      for (let d = 1; d <= DAYS; d++) {
        await sql.unsafe(
          `create table events_day${d} partition of events for values from (${RUN_BASE * d}) to (${RUN_BASE * (d + 1)})`,
        );
        await sql.unsafe(
          `create table task_logs_day${d} partition of task_logs for values from (${TI_BASE * d}) to (${TI_BASE * (d + 1)})`,
        );
      }
      const before = { runs: await sizeOf(sql, ['dag_runs']), tis: await sizeOf(sql, ['task_instances']) };
      await generateDay(sql, template, 1, dayStart(now, 1));
      const after = { runs: await sizeOf(sql, ['dag_runs']), tis: await sizeOf(sql, ['task_instances']) };
      for (let d = 2; d <= DAYS; d++) await generateDay(sql, template, d, dayStart(now, d));
      // The real runs go (they were the template): ids follow creation, and theirs, the lowest,
      // are the newest.
      await removeRuns(sql, ids, {});
      await sql`vacuum analyze`;
      const tasksPerDay = RUNS_PER_DAY * TASKS;
      const diff = (a: Size, b: Size): Size => ({
        heap: a.heap - b.heap,
        indexes: a.indexes - b.indexes,
        toast: a.toast - b.toast,
      });
      const perTable: [string, Size][] = [
        ['dag_runs', diff(after.runs, before.runs)],
        ['task_instances', diff(after.tis, before.tis)],
        ['events', await sizeOf(sql, ['events_day1'])],
        ['task_logs', await sizeOf(sql, ['task_logs_day1'])],
      ];
      const sizeRows = perTable.map(([table, sz]) => {
        const total = sz.heap + sz.indexes + sz.toast;
        return {
          table,
          'heap B/task': round(sz.heap / tasksPerDay, 1),
          'indexes B/task': round(sz.indexes / tasksPerDay, 1),
          'TOAST B/task': round(sz.toast / tasksPerDay, 1),
          'total B/task': round(total / tasksPerDay, 1),
        };
      });
      const totalPerTask = sizeRows.reduce((n, r) => n + r['total B/task'], 0);
      const perDayAtRate = totalPerTask * TASKS_PER_SECOND * 86_400;
      sizeRows.push({
        table: 'all four',
        'heap B/task': round(
          sizeRows.reduce((n, r) => n + r['heap B/task'], 0),
          1,
        ),
        'indexes B/task': round(
          sizeRows.reduce((n, r) => n + r['indexes B/task'], 0),
          1,
        ),
        'TOAST B/task': round(
          sizeRows.reduce((n, r) => n + r['TOAST B/task'], 0),
          1,
        ),
        'total B/task': round(totalPerTask, 1),
      });
      await report('retention-bytes', sizeRows, {
        dag: `${TASKS} tasks (extract, ${TASKS - 2} transforms, load), ${LINES} log lines each`,
        perRun: { taskInstances: shape!.tis, events: shape!.events, logLines: shape!.lines },
        tasksPerDay,
        [`GB per day at ${TASKS_PER_SECOND} tasks/s`]: round(perDayAtRate / 2 ** 30, 2),
      });

      // Removing a day: retention (partitions dropped) on days 1 and 3, db clean (rows deleted) on 2 and 4.
      const keeperErrors: unknown[] = [];
      const clock = { now };
      const historyRound = createHistoryRound({
        sql,
        logger: pino({ level: 'silent' }),
        retentionMs: DAY_MS,
        agentRetentionMs: null,
        agentLiveMs: 15_000,
        now: () => clock.now,
        counters: errorsOnly(keeperErrors),
      });
      // A first pass with nothing past its retention: the keeper drops the partitions left empty.
      clock.now = new Date(dayStart(now, 1).getTime() + DAY_MS - 1);
      for (let fresh = true; (await historyRound(fresh)).more; fresh = false);
      const removed = async (d: number) => {
        const [r] = await sql<
          { n: number }[]
        >`select count(*)::int as n from dag_runs where id >= ${RUN_BASE * d} and id < ${RUN_BASE * (d + 1)}`;
        return r!.n === 0;
      };
      const rows: Record<string, string | number>[] = [];
      for (const [d, how] of [
        [1, 'retention'],
        [2, 'db clean'],
        [3, 'retention'],
        [4, 'db clean'],
      ] as const) {
        // Day d is over: the cutoff falls between its last run and day d+1's first.
        const cutoff = new Date(dayStart(now, d + 1).getTime() - 1);
        let rounds = 0;
        const cost =
          how === 'retention'
            ? await measure(sql, async () => {
                clock.now = new Date(cutoff.getTime() + DAY_MS);
                for (;;) {
                  rounds++;
                  const r = await historyRound(false);
                  if (!r.more) break;
                }
              })
            : await measure(sql, () => cleanHistory(sql, { endedBefore: cutoff, dryRun: false }));
        expect(keeperErrors).toEqual([]);
        expect(await removed(d)).toBe(true);
        const leftover = how === 'retention' ? [] : [`events_day${d}`, `task_logs_day${d}`];
        const vacuum = await measure(sql, () =>
          sql.unsafe(`vacuum (analyze false) dag_runs, task_instances${leftover.map((t) => `, ${t}`).join('')}`),
        );
        const dropped = (await sql`select 1 from pg_class where relname = ${`events_day${d}`}`).length === 0;
        rows.push({
          day: d,
          how:
            how === 'retention'
              ? `retention (${rounds} rounds${dropped ? ', partitions dropped' : ''})`
              : 'db clean (rows deleted)',
          tasks: tasksPerDay,
          'remove ms': round(cost.ms, 0),
          'remove WAL MB': MB(cost.walBytes),
          'remove pages written': cost.pages,
          'vacuum ms': round(vacuum.ms, 0),
          'vacuum WAL MB': MB(vacuum.walBytes),
          'vacuum pages written': vacuum.pages,
          'total ms per 1000 tasks': round(((cost.ms + vacuum.ms) * 1000) / tasksPerDay, 1),
          'total WAL B per task': round((cost.walBytes + vacuum.walBytes) / tasksPerDay, 0),
        });
      }
      await report('retention-removal', rows, { runsPerDay: RUNS_PER_DAY, tasksPerDay });
    } finally {
      await s?.stop();
      await db.drop();
      await rm(tmp, { recursive: true, force: true });
    }
  });
});
