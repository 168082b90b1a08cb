import type { Sql } from '../sql.js';

/**
 * Deletes at most `limit` events received before `before`, oldest first: a sender's key is
 * accepted once for as long as its event is kept (the history retention).
 */
export async function forgetOldEvents(sql: Sql, o: { before: Date; limit: number }): Promise<number> {
  const rows = await sql`
    delete from external_events where id in (
      select id from external_events where received_at < ${o.before} order by received_at limit ${o.limit})
    returning 1`;
  return rows.length;
}
