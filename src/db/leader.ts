import type { Sql } from './sql.js';

/**
 * The replica id of the current leader, read from Postgres itself: the session holding the
 * advisory lock names its replica in `application_name`. No state of our own to go stale.
 */
export async function currentLeaderId(sql: Sql, lockKey: number): Promise<string | null> {
  const [row] = await sql<{ application_name: string }[]>`
    select a.application_name from pg_locks l join pg_stat_activity a on a.pid = l.pid
    where l.locktype = 'advisory' and l.objid = ${lockKey} and l.granted and l.database = (
      select oid from pg_database where datname = current_database())
    limit 1`;
  const name = row?.application_name ?? null;
  return name?.startsWith('leoflow:') ? name.slice('leoflow:'.length) : null;
}
