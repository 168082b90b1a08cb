import type { Sql, TxSql } from '../sql.js';
import type { HistoryTable } from './history-tables.js';
import { idBounds, type Partition } from './list-partitions.js';

/** Whether no owner row (run, task instance) is left in a partition's range: one index probe. */
export async function ownerRangeEmpty(sql: Sql | TxSql, table: HistoryTable, p: Partition): Promise<boolean> {
  const [from, to] = idBounds(p);
  const [row] = await sql<{ taken: boolean }[]>`
    select exists (select 1 from ${sql(table.owner)} where id >= ${from}::bigint and id < ${to}::bigint) as taken`;
  return !row!.taken;
}

/**
 * Drops a partition of a history table once no owner of its range is left: all its rows are then
 * of history already removed, and they go at the cost of unlinking files, not of a delete per row
 * (and the WAL and vacuuming that come with it). DROP takes the table's ACCESS EXCLUSIVE lock;
 * writers queue behind it while it waits, so it waits at most `lockTimeoutMs` (a later round tries
 * again). Checked again under that lock: a statement that writes this table holds its lock until
 * its transaction ends, so an owner made with its history in the same statement (a run and its
 * first event) is committed and seen, or was never made. Resolves whether the partition went.
 * Only for a partition below the one new rows go to (`currentPartition`).
 */
export async function dropEmptyPartition(
  sql: Sql,
  table: HistoryTable,
  p: Partition,
  lockTimeoutMs: number,
): Promise<boolean> {
  if (!(await ownerRangeEmpty(sql, table, p))) return false;
  try {
    return await sql.begin(async (tx) => {
      await tx.unsafe(`set local lock_timeout = ${Math.max(1, Math.round(lockTimeoutMs))}`);
      await tx`lock table only ${tx(table.name)} in access exclusive mode`;
      if (!(await ownerRangeEmpty(tx, table, p))) return false;
      await tx`drop table ${tx(p.name)}`;
      return true;
    });
  } catch (err) {
    // 55P03: the lock was not had in time (busy writers). 42P01: another replica dropped it.
    const code = (err as { code?: string }).code;
    if (code === '55P03' || code === '42P01') return false;
    throw err;
  }
}
