import type { Sql } from '../sql.js';

/** The seq of a run's last event, or null when it has none. */
export async function lastEventSeq(sql: Sql, runId: string): Promise<bigint | null> {
  const [r] = await sql<{ last: string | null }[]>`select max(seq)::text as last from events where run_id = ${runId}`;
  return r?.last == null ? null : BigInt(r.last);
}
