import type { Sql } from '../sql.js';

/**
 * Where the span recorder left off in the events log, if it saved a place within `maxAgeMs` (an
 * older one is not gone back to: turning tracing on again after a week should not export the week).
 */
export async function readTraceCursor(sql: Sql, maxAgeMs: number): Promise<bigint | null> {
  const [row] = await sql<{ after_seq: string }[]>`
    select after_seq::text from trace_export where saved_at > now() - ${maxAgeMs} * interval '1 millisecond'`;
  return row ? BigInt(row.after_seq) : null;
}

/** Saves the recorder's place: every span of an event up to `afterSeq` has been handed to the exporter. */
export async function saveTraceCursor(sql: Sql, afterSeq: bigint): Promise<void> {
  await sql`
    insert into trace_export (after_seq, saved_at) values (${afterSeq.toString()}::bigint, now())
    on conflict (one) do update set after_seq = excluded.after_seq, saved_at = excluded.saved_at`;
}
