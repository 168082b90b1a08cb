import { listReplicas } from './replicas.js';
import type { Sql } from './sql.js';

/** A live replica and the address it takes agent streams on. */
export interface ReplicaAddress {
  replicaId: string;
  agentUrl: string;
}

/** Records where this replica takes agent streams (at start, once it listens). */
export async function advertiseReplica(sql: Sql, replicaId: string, agentUrl: string): Promise<void> {
  await sql`
    insert into replica_addresses (replica_id, agent_url) values (${replicaId}, ${agentUrl})
    on conflict (replica_id) do update set agent_url = excluded.agent_url, advertised_at = now()`;
}

/** Takes this replica's address back (it is stopping): no Welcome sends agents here any more. */
export async function withdrawReplica(sql: Sql, replicaId: string): Promise<void> {
  await sql`delete from replica_addresses where replica_id = ${replicaId}`;
}

/**
 * The addresses of the replicas alive now, oldest advertisement first. Alive is Postgres's word
 * (the replica's named session is open), so the row of one that died is never handed out.
 */
export async function liveReplicaAddresses(sql: Sql): Promise<ReplicaAddress[]> {
  const [rows, live] = await Promise.all([
    sql<
      { replica_id: string; agent_url: string }[]
    >`select replica_id, agent_url from replica_addresses order by advertised_at, replica_id`,
    listReplicas(sql),
  ]);
  const alive = new Set(live.map((r) => r.replicaId));
  return rows.filter((r) => alive.has(r.replica_id)).map((r) => ({ replicaId: r.replica_id, agentUrl: r.agent_url }));
}
