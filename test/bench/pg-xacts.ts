import type { Sql } from '../../src/db/sql.js';

/**
 * Committed plus rolled-back transactions of one database so far (pg_stat_database). Backends
 * publish their counts when idle, at most once a second: wait `STATS_SETTLE_MS` after the work
 * before the second reading. The reading is itself one transaction on `sql`'s database.
 */
export async function xacts(sql: Sql, dbName: string): Promise<number> {
  const [r] = await sql<
    { n: string }[]
  >`select xact_commit + xact_rollback as n from pg_stat_database where datname = ${dbName}`;
  return Number(r!.n);
}

export const STATS_SETTLE_MS = 2000;

/**
 * A backend that went idle within a second of its last report holds its counts until it has been
 * idle 10 s (Postgres 15+'s PGSTAT_IDLE_INTERVAL): a burst of statements just before a reading
 * shows up in the next. Wait this long around a window that must not take in another's counts.
 */
export const STATS_IDLE_FLUSH_MS = 11_000;

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** Median of a small sample (the lower middle for an even count). */
export function median(values: number[]): number {
  const s = [...values].sort((a, b) => a - b);
  return s[Math.floor((s.length - 1) / 2)]!;
}

export const round = (x: number, digits = 1) => Math.round(x * 10 ** digits) / 10 ** digits;
