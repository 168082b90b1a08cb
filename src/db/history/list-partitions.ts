import type { Sql, TxSql } from '../sql.js';
import type { HistoryTable } from './history-tables.js';

/** One range partition of a history table: owner ids `from` (inclusive) to `to` (exclusive). */
export interface Partition {
  readonly name: string;
  /** null: MINVALUE (the first partition, which took the rows stored before migration 008). */
  readonly from: bigint | null;
  /** null: MAXVALUE (never made by Leoflow, but read if an operator made one). */
  readonly to: bigint | null;
}

export interface Partitions {
  /** The range partitions, lowest first. */
  readonly ranges: Partition[];
  /** The default partition, which takes what no range covers; null if there is none. */
  readonly fallback: string | null;
}

const BOUND = /^FOR VALUES FROM \((MINVALUE|'?(-?\d+)'?)\) TO \((MAXVALUE|'?(-?\d+)'?)\)$/;

/** The partitions of a history table, read from the catalog (the bounds are its truth). */
export async function listPartitions(sql: Sql | TxSql, table: HistoryTable): Promise<Partitions> {
  const rows = await sql<{ name: string; bound: string }[]>`
    select c.relname as name, pg_get_expr(c.relpartbound, c.oid) as bound
    from pg_inherits i join pg_class c on c.oid = i.inhrelid
    where i.inhparent = ${table.name}::regclass`;
  const ranges: Partition[] = [];
  let fallback: string | null = null;
  for (const r of rows) {
    if (r.bound === 'DEFAULT') {
      fallback = r.name;
      continue;
    }
    const m = BOUND.exec(r.bound);
    if (!m) throw new Error(`partition ${r.name} of ${table.name} has a bound this version cannot read: ${r.bound}`);
    ranges.push({
      name: r.name,
      from: m[2] === undefined ? null : BigInt(m[2]),
      to: m[4] === undefined ? null : BigInt(m[4]),
    });
  }
  ranges.sort((a, b) => (a.from === null ? -1 : b.from === null ? 1 : a.from < b.from ? -1 : a.from > b.from ? 1 : 0));
  return { ranges, fallback };
}

/** The highest owner id, or 0 when the owner table is empty (one probe of its primary key). */
export async function maxOwnerId(sql: Sql | TxSql, table: HistoryTable): Promise<bigint> {
  const [row] = await sql<{ max: string | null }[]>`select max(id)::text as max from ${sql(table.owner)}`;
  return BigInt(row?.max ?? 0);
}

/**
 * The partition that rows of new owners go to now (the one whose range holds the highest owner
 * id), or null if none does (they go to the default partition). Partitions from it up take new
 * rows and are never dropped.
 */
export function currentPartition(parts: Partitions, maxId: bigint): Partition | null {
  return parts.ranges.find((p) => (p.from === null || p.from <= maxId) && (p.to === null || maxId < p.to)) ?? null;
}

const MIN_ID = -(2n ** 63n);
const MAX_ID = 2n ** 63n - 1n;

/** A partition's range as two bind values (MINVALUE and MAXVALUE as bigint's extremes), so a
 *  statement bounds its key with `>= from and < to` and uses an index whatever the range. */
export function idBounds(p: Partition): [string, string] {
  return [String(p.from ?? MIN_ID), String(p.to ?? MAX_ID)];
}
