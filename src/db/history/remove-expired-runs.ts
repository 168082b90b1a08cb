import { TERMINAL_RUN_STATES } from '../../core/states.js';
import { inlineLiterals } from '../inline-literals.js';
import type { Sql } from '../sql.js';

export interface ExpiredRunsRemoved {
  runs: number;
  taskInstances: number;
  /** The lowest and highest run id removed (their events' partitions), null when none was. */
  runIds: [bigint, bigint] | null;
  /** Likewise for the task instances (their log lines' partitions). */
  tiIds: [bigint, bigint] | null;
}

/**
 * Retention's removal: these runs and their task instances, each run only if it is still finished
 * and ended before `cutoff` when locked. Their events and log lines stay where they are: they go
 * with their partitions once no run (task instance) of a partition's range is left, which costs
 * unlinking a file instead of a delete per row (src/db/history/drop-empty-partition.ts). Until
 * then nothing reads them: every read of history starts from a run or a task instance.
 */
export async function removeExpiredRuns(sql: Sql, runIds: string[], cutoff: Date): Promise<ExpiredRunsRemoved> {
  if (runIds.length === 0) return { runs: 0, taskInstances: 0, runIds: null, tiIds: null };
  const [row] = await sql<
    { runs: number; tis: number; rmin: string | null; rmax: string | null; tmin: string | null; tmax: string | null }[]
  >`
    with r as (
      delete from dag_runs where id = any(${runIds}::bigint[])
        and state in (${inlineLiterals(sql, TERMINAL_RUN_STATES)}) and ended_at < ${cutoff}
      returning id),
    t as (delete from task_instances where run_id in (select id from r) returning id)
    select (select count(*) from r)::int as runs, (select count(*) from t)::int as tis,
      (select min(id) from r)::text as rmin, (select max(id) from r)::text as rmax,
      (select min(id) from t)::text as tmin, (select max(id) from t)::text as tmax`;
  const range = (lo: string | null, hi: string | null): [bigint, bigint] | null =>
    lo === null || hi === null ? null : [BigInt(lo), BigInt(hi)];
  return {
    runs: row!.runs,
    taskInstances: row!.tis,
    runIds: range(row!.rmin, row!.rmax),
    tiIds: range(row!.tmin, row!.tmax),
  };
}
