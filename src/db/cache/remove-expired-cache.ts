import type { Sql } from '../sql.js';

/**
 * Retention of the completion cache: entries done past their ttl, at most `limit` a call (oldest
 * first), so a large backlog is removed in bounded statements. Resolves how many went.
 */
export async function removeExpiredCache(sql: Sql, limit: number): Promise<number> {
  const rows = await sql`
    delete from task_cache c using (
      select dag_id, task_id, spec_hash, key_hash from task_cache
      where state = 'done' and expires_at <= now() order by expires_at limit ${limit}) x
    where c.dag_id = x.dag_id and c.task_id = x.task_id and c.spec_hash = x.spec_hash and c.key_hash = x.key_hash
      and c.state = 'done' and c.expires_at <= now()`;
  return rows.count;
}
