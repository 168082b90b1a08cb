import type pg from 'pg';

/** Blocks until this session holds the leader's advisory lock (session-level: it ends with the session). */
export async function takeLeaderLock(c: pg.Client, lockKey: number): Promise<void> {
  await c.query('select pg_advisory_lock($1)', [lockKey]);
}
