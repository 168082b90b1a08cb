import type { Sql } from '../sql.js';
import { releaseEvents, releaseMove } from './release-claim.js';

/**
 * Gives back a claim whose Assign could not be pushed down its agent's stream (the stream was
 * closing, or its replica is shutting down), as `releaseClaim` does, but only while no other
 * session holds the agent: a session that opened since may already have sent the attempt (a new
 * session sends the agent whatever is queued for it). The agent's row is locked for the check, so
 * a session opening meanwhile either reads the attempt once it was given back, or is seen here and
 * the claim is kept for it. `heldBy` is the replica holding the agent when the claim was kept.
 */
export async function releaseUndelivered(
  sql: Sql,
  a: { tiId: string; tryNumber: number; attemptToken: string; agentId: string },
  closedSessionId: string | null,
  reason: string,
): Promise<{ released: boolean; heldBy: string | null }> {
  const [row] = await sql<{ released: boolean; held_by: string | null }[]>`
    with agent as (
      select session_id, connected_replica from agents where agent_id = ${a.agentId} for update),
    moved as (${releaseMove(
      sql,
      a,
      reason,
      sql`agent_id = ${a.agentId} and not exists (
        select 1 from agent where session_id is not null and session_id is distinct from ${closedSessionId}::uuid)`,
    )}),
    ev as (${releaseEvents(sql, reason)})
    select exists (select 1 from moved) as released, (select connected_replica from agent) as held_by`;
  return { released: row!.released, heldBy: row!.released ? null : (row!.held_by ?? null) };
}
