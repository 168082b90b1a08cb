import type { Sql } from './sql.js';

const PREFIX = 'leoflow:';
/** The largest lateness the name can carry (36^5 − 1 ms, about 16 h): beyond, it says that much. */
const MAX_LATE_MS = 36 ** 5 - 1;

/** What the leader last said of its loop: when its last full step began, and how late it was then. */
export interface LeaderStepReport {
  lastFullStepAt: Date;
  lateMs: number;
}

export interface LeaderView {
  replicaId: string;
  /** Null until the leader's watchdog has first said it (a moment after it was elected). */
  report: LeaderStepReport | null;
}

/**
 * The `application_name` of the leader's lock session: `leoflow:<replica id>`, then, once it
 * has stepped, ` <last full step (ms since epoch)>.<lateness (ms)>` in base 36. The name is where
 * every replica already finds the leader, and the leader's watchdog sets it in the round trip it
 * makes anyway: no table, no write. Replica ids (≤ 38 of `A-Za-z0-9._-`) leave it within
 * Postgres's 63 bytes.
 */
export function leaderSessionName(
  replicaId: string,
  report: { lastFullStepAt: number; lateMs: number } | null,
): string {
  if (!report) return `${PREFIX}${replicaId}`;
  const late = Math.min(MAX_LATE_MS, Math.max(0, Math.round(report.lateMs)));
  return `${PREFIX}${replicaId} ${Math.round(report.lastFullStepAt).toString(36)}.${late.toString(36)}`;
}

/** The leader's lock session's name read back; null when it is not one of ours. */
export function parseLeaderSessionName(name: string): LeaderView | null {
  if (!name.startsWith(PREFIX)) return null;
  const [replicaId, note] = name.slice(PREFIX.length).split(' ', 2) as [string, string | undefined];
  const m = note ? /^([0-9a-z]+)\.([0-9a-z]+)$/.exec(note) : null;
  const report = m ? { lastFullStepAt: new Date(parseInt(m[1]!, 36)), lateMs: parseInt(m[2]!, 36) } : null;
  return { replicaId, report };
}

/**
 * The current leader, read from Postgres itself: the session holding the advisory lock names its
 * replica, and what it last said of its loop, in `application_name`. No state of our own to go stale.
 */
export async function currentLeader(sql: Sql, lockKey: number): Promise<LeaderView | null> {
  const [row] = await sql<{ application_name: string }[]>`
    select a.application_name from pg_locks l join pg_stat_activity a on a.pid = l.pid
    where l.locktype = 'advisory' and l.objid = ${lockKey} and l.granted and l.database = (
      select oid from pg_database where datname = current_database())
    limit 1`;
  return row ? parseLeaderSessionName(row.application_name) : null;
}

/** The replica id of the current leader (see {@link currentLeader}). */
export async function currentLeaderId(sql: Sql, lockKey: number): Promise<string | null> {
  return (await currentLeader(sql, lockKey))?.replicaId ?? null;
}
