import type { Sql } from '../sql.js';

/** The seq of the feed's last event (any run), or 0 when it has none: where a watch "from now" starts. */
export async function lastFeedSeq(sql: Sql): Promise<bigint> {
  const [r] = await sql<{ last: string | null }[]>`select max(seq)::text as last from events`;
  return r?.last == null ? 0n : BigInt(r.last);
}
