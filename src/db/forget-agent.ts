import type { Sql } from './sql.js';

/**
 * Removes the row of an agent that is gone for good and holds no stream (a pod's one-shot agent,
 * once its pod is deleted), so one row per pod does not pile up in `agents`.
 */
export async function forgetAgent(sql: Sql, agentId: string): Promise<void> {
  await sql`delete from agents where agent_id = ${agentId} and session_id is null`;
}
