import { TERMINAL_RUN_STATES } from '../../core/states.js';
import { inlineLiterals } from '../inline-literals.js';
import type { Fragment, Sql, TxSql } from '../sql.js';

/** Rows of each table, removed or to be. */
export interface HistoryRowCounts {
  runs: number;
  taskInstances: number;
  events: number;
  taskLogs: number;
}

export const NO_HISTORY: HistoryRowCounts = { runs: 0, taskInstances: 0, events: 0, taskLogs: 0 };

export function addCounts(a: HistoryRowCounts, b: HistoryRowCounts): HistoryRowCounts {
  return {
    runs: a.runs + b.runs,
    taskInstances: a.taskInstances + b.taskInstances,
    events: a.events + b.events,
    taskLogs: a.taskLogs + b.taskLogs,
  };
}

/** Which of the runs named may go: finished ones only, and ended before a time when given. */
export interface RemovalGuard {
  endedBefore?: Date;
}

const guardOf = (sql: Sql | TxSql, g: RemovalGuard, alias?: string): Fragment => {
  const col = (c: string) => (alias ? sql`${sql(alias)}.${sql(c)}` : sql`${sql(c)}`);
  return sql`${col('state')} in (${inlineLiterals(sql, TERMINAL_RUN_STATES)}) ${
    g.endedBefore ? sql`and ${col('ended_at')} < ${g.endedBefore}` : sql``
  }`;
};

/**
 * Removes these runs with everything of theirs — task instances, events, log lines — in one
 * transaction, each run only if it is still finished (and ended before the guard's time) when
 * locked: a run cleared back to running since it was picked is kept, and so is all of its
 * history. Events and lines go row by row, by key, in whichever partitions hold them: for `db
 * clean` and `dag delete`, which remove exactly the runs asked for. (Retention removes runs with
 * `removeExpiredRuns` and lets their history go with whole partitions.)
 */
export async function removeRuns(sql: Sql, runIds: string[], guard: RemovalGuard): Promise<HistoryRowCounts> {
  if (runIds.length === 0) return NO_HISTORY;
  return sql.begin((tx) => removeRunsIn(tx, runIds, guard));
}

/** `removeRuns` in the caller's transaction. */
export async function removeRunsIn(tx: TxSql, runIds: string[], guard: RemovalGuard): Promise<HistoryRowCounts> {
  if (runIds.length === 0) return NO_HISTORY;
  // The task instances are locked first, in id order: the log writer locks those it writes lines
  // of (key share) in the same order, so the two wait for each other and never deadlock.
  await tx`
    select t.id from task_instances t join dag_runs r on r.id = t.run_id
    where r.id = any(${runIds}::bigint[]) and ${guardOf(tx, guard, 'r')}
    order by t.id for update of t`;
  const [gone] = await tx<{ runs: string[]; tis: string[] }[]>`
    with r as (delete from dag_runs where id = any(${runIds}::bigint[]) and ${guardOf(tx, guard)} returning id),
    t as (delete from task_instances where run_id in (select id from r) returning id)
    select coalesce((select array_agg(id) from r), '{}') as runs, coalesce((select array_agg(id) from t), '{}') as tis`;
  const { runs, tis } = gone!;
  if (runs.length === 0) return NO_HISTORY;
  const [rows] = await tx<{ events: number; logs: number }[]>`
    with e as (delete from events where run_id = any(${runs}::bigint[]) returning 1),
    l as (delete from task_logs where ti_id = any(${tis}::bigint[]) returning 1)
    select (select count(*) from e)::int as events, (select count(*) from l)::int as logs`;
  return { runs: runs.length, taskInstances: tis.length, events: rows!.events, taskLogs: rows!.logs };
}

/** What `removeRuns` would remove of these runs now; writes nothing. */
export async function countRuns(sql: Sql, runIds: string[], guard: RemovalGuard): Promise<HistoryRowCounts> {
  if (runIds.length === 0) return NO_HISTORY;
  const [row] = await sql<HistoryRowCounts[]>`
    with r as (select id from dag_runs where id = any(${runIds}::bigint[]) and ${guardOf(sql, guard)}),
    t as (select id from task_instances where run_id in (select id from r))
    select (select count(*) from r)::int as runs, (select count(*) from t)::int as "taskInstances",
      (select count(*) from events where run_id = any(array(select id from r)))::int as events,
      (select count(*) from task_logs where ti_id = any(array(select id from t)))::int as "taskLogs"`;
  return row!;
}
