import type pg from 'pg';

/**
 * The watchdog's one round trip: renames the lock session (the leader's report rides in its name)
 * and answers whether this session still holds the advisory lock.
 */
export async function checkLeaderLock(c: pg.Client, lockKey: number, sessionName: string): Promise<boolean> {
  const { rows } = await c.query<{ n: number }>(
    `select set_config('application_name', $2, false) as name, (select count(*)::int from pg_locks
     where locktype = 'advisory' and objid = $1 and granted and pid = pg_backend_pid()) as n`,
    [lockKey, sessionName],
  );
  return rows[0]?.n === 1;
}
