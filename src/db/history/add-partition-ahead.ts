import type { Sql } from '../sql.js';
import type { HistoryTable } from './history-tables.js';
import { listPartitions, maxOwnerId, type Partition } from './list-partitions.js';

const DAY_MS = 86_400_000n;
/** A rate measured over less than this is too noisy to size a day by. */
const MIN_ELAPSED_MS = 600_000n;
const MAX_SPAN = 1_000_000_000n;
/** Partitions a retention period is cut into: about this many stay, whatever the period. */
const PARTITIONS_PER_RETENTION = 30n;

/**
 * Adds the next partition of a history table before the newest one fills: once owner ids reach
 * half of the top range, a range right above it, sized at the rate the top range's ids were used
 * (at least `minSpan`) for a thirtieth of the retention period (a day at least), so about 30
 * partitions are kept whatever the load and the period: a day each at 30 days, three at 90. With
 * retention off (`retentionMs` null) nothing is ever dropped, and the new range is as wide as every
 * id used so far (a day's worth at least): their number grows with the logarithm of the history,
 * not one a day, until ranges reach MAX_SPAN ids. When ids have outrun every range (no leader made one in
 * time, and their rows went to the default partition meanwhile), the new range starts a margin above the
 * highest id, where no row can be on its way yet. Attaching does not block writers (a SHARE UPDATE EXCLUSIVE
 * lock on the table; the default partition, which it checks holds no row of the range, is locked briefly).
 * Resolves the partition added, or null when none was needed or another replica just added it.
 */
export async function addPartitionAhead(
  sql: Sql,
  table: HistoryTable,
  now: Date,
  retentionMs: number | null,
): Promise<Partition | null> {
  const parts = await listPartitions(sql, table);
  const top = parts.ranges.at(-1);
  if (!top || top.to === null) return null;
  const maxId = await maxOwnerId(sql, table);
  const from = top.from ?? 0n;
  const outrun = maxId >= top.to;
  if (!outrun && maxId - from < (top.to - from) / 2n) return null;

  const period = retentionMs === null ? DAY_MS : BigInt(Math.round(retentionMs)) / PARTITIONS_PER_RETENTION;
  const forPeriod = await spanFor(sql, table, from, maxId, now, period > DAY_MS ? period : DAY_MS);
  const span = retentionMs === null && maxId > forPeriod ? (maxId < MAX_SPAN ? maxId : MAX_SPAN) : forPeriod;
  const margin = span / 10n > table.minSpan ? span / 10n : table.minSpan;
  const lo = outrun ? maxId + margin : top.to;
  const partition: Partition = { name: `${table.name}_p${lo}`, from: lo, to: lo + span };
  try {
    await sql.begin(async (tx) => {
      await tx`create table ${tx(partition.name)} (like ${tx(table.name)} including defaults including constraints)`;
      await tx.unsafe(
        `alter table ${table.name} attach partition ${partition.name} for values from (${lo}) to (${lo + span})`,
      );
    });
  } catch (err) {
    // Another replica (a leader overlapping this one) added it first, or ids moved on while this
    // one decided: the next round reads the partitions again.
    const code = (err as { code?: string }).code;
    if (code === '42P07' || code === '42P17' || code === '23514') return null;
    throw err;
  }
  return partition;
}

/** Owner ids used in `periodMs`, from how fast the top range was used since its first owner was made. */
async function spanFor(
  sql: Sql,
  table: HistoryTable,
  from: bigint,
  maxId: bigint,
  now: Date,
  periodMs: bigint,
): Promise<bigint> {
  const first =
    table.owner === 'dag_runs'
      ? await sql<{ at: Date }[]>`select created_at as at from dag_runs where id >= ${String(from)} order by id limit 1`
      : await sql<{ at: Date }[]>`
          select r.created_at as at from task_instances t join dag_runs r on r.id = t.run_id
          where t.id >= ${String(from)} order by t.id limit 1`;
  let span = table.minSpan;
  if (first[0] && maxId >= from) {
    const elapsed = BigInt(Math.max(0, now.getTime() - first[0].at.getTime()));
    span = ((maxId - from + 1n) * periodMs) / (elapsed > MIN_ELAPSED_MS ? elapsed : MIN_ELAPSED_MS);
  }
  return span < table.minSpan ? table.minSpan : span > MAX_SPAN ? MAX_SPAN : span;
}
