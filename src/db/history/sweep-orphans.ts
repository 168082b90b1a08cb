import { TERMINAL_RUN_STATES } from '../../core/states.js';
import { inlineLiterals } from '../inline-literals.js';
import type { Sql } from '../sql.js';
import type { HistoryTable } from './history-tables.js';
import { idBounds, type Partition } from './list-partitions.js';

/** Owner ids a sweep looks at per statement: bounds the rows one statement reads. */
const WINDOW = 1000n;

export interface SweepResult {
  /** Rows deleted. */
  deleted: number;
  /** The owner id to go on from; null when nothing is left to look at. */
  next: bigint | null;
}

/**
 * Deletes, in one partition of a history table, up to `limit` rows whose owner (run, task
 * instance) is gone, looking at owner ids from `from` on (one window of them). For a partition
 * that cannot be dropped because a few owners of its range are still there (a run that has not
 * ended, days after the rest of its range was removed), and for the default partition, which is
 * never dropped: what went with partitions elsewhere goes row by row here. Rows of a live owner
 * are never touched, however stale the caller's view: the owner is looked up in the statement.
 */
export async function sweepOrphans(
  sql: Sql,
  table: HistoryTable,
  partition: string,
  from: bigint,
  limit: number,
): Promise<SweepResult> {
  const [first] = await sql<{ key: string | null }[]>`
    select min(${sql(table.key)})::text as key from ${sql(partition)} where ${sql(table.key)} >=
      ${String(from)}::bigint`;
  if (!first?.key) return { deleted: 0, next: null };
  const lo = BigInt(first.key);
  const hi = lo + WINDOW;
  const [row] = await sql<{ deleted: number }[]>`
    with gone as (
      delete from ${sql(partition)} where ctid = any(array(
        select e.ctid from ${sql(partition)} e
        where e.${sql(table.key)} >= ${String(lo)}::bigint and e.${sql(table.key)} < ${String(hi)}::bigint
          and not exists (select 1 from ${sql(table.owner)} o where o.id = e.${sql(table.key)})
        limit ${limit}))
      returning 1)
    select count(*)::int as deleted from gone`;
  const deleted = row!.deleted;
  // A full batch may have left more in this window; otherwise the window is done.
  return { deleted, next: deleted >= limit ? lo : hi };
}

/**
 * Whether every owner left in a partition's range belongs to a run that has not ended: then what
 * else was in the range has been removed for good, and its rows can be swept now rather than
 * wait for the partition to empty (it may never: a run held in a paused DAG). While a finished run
 * is left, the range is still being removed run by run as each one's retention ends, and its rows
 * go with the partition once the last one is removed.
 */
export async function onlyUnfinishedOwnersLeft(sql: Sql, table: HistoryTable, p: Partition): Promise<boolean> {
  const [from, to] = idBounds(p);
  const finished = inlineLiterals(sql, TERMINAL_RUN_STATES);
  const [row] =
    table.owner === 'dag_runs'
      ? await sql<{ finished: boolean }[]>`
          select exists (select 1 from dag_runs where id >= ${from}::bigint and id < ${to}::bigint and state in
            (${finished})) as finished`
      : await sql<{ finished: boolean }[]>`
          select exists (select 1 from task_instances t join dag_runs r on r.id = t.run_id
                         where t.id >= ${from}::bigint and t.id < ${to}::bigint and r.state in (${finished})) as
                           finished`;
  return !row!.finished;
}
