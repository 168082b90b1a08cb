import type { Sql } from './sql.js';

/** The prefix of the session that names a replica and its role: `leoflow-replica:<role>:<id>`. */
export const REPLICA_SESSION_PREFIX = 'leoflow-replica:';

/** The `application_name` of a replica's long-lived (LISTEN) session. */
export function replicaSessionName(role: string, replicaId: string): string {
  return `${REPLICA_SESSION_PREFIX}${role}:${replicaId}`;
}

export interface ReplicaView {
  replicaId: string;
  role: string;
  connectedSince: Date;
}

/**
 * Every replica connected to this database now, read from Postgres itself: each keeps one
 * long-lived session named after its role and id, and a replica that died lost it with its
 * sockets. Nothing of our own to go stale, as for the leader.
 */
export async function listReplicas(sql: Sql): Promise<ReplicaView[]> {
  const rows = await sql<{ application_name: string; backend_start: Date }[]>`
    select application_name, backend_start from pg_stat_activity
    where datname = current_database() and application_name like ${`${REPLICA_SESSION_PREFIX}%`}
    order by application_name`;
  return rows.map((r) => {
    const rest = r.application_name.slice(REPLICA_SESSION_PREFIX.length);
    const colon = rest.indexOf(':');
    return { role: rest.slice(0, colon), replicaId: rest.slice(colon + 1), connectedSince: r.backend_start };
  });
}
