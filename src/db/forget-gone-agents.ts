import { agentForgettable } from './forget-agent.js';
import type { Sql } from './sql.js';

/**
 * Deletes at most `limit` agents last seen before `seenBefore` that may go (`agentForgettable`),
 * the longest gone first, and returns their ids. Rows another transaction holds (a Hello of that
 * id, a forget by hand) are skipped this time.
 */
export async function forgetGoneAgents(
  sql: Sql,
  o: { seenBefore: Date; liveMs: number; limit: number },
): Promise<string[]> {
  const rows = await sql<{ agent_id: string }[]>`
    delete from agents where agent_id in (
      select a.agent_id from agents a
      where coalesce(a.last_seen_at, '-infinity') < ${o.seenBefore} and ${agentForgettable(sql, o.liveMs)}
      order by a.last_seen_at nulls first
      limit ${o.limit}
      for update skip locked)
    returning agent_id`;
  return rows.map((r) => r.agent_id);
}
