import { ACTIVE_TI_STATES } from '../../core/states.js';
import { inlineLiterals } from '../inline-literals.js';
import type { Sql } from '../sql.js';

/**
 * Binds an active attempt to the agent that presents its token (a pod's agent, given exactly its
 * attempt), unless another agent holds it. False when the token is not the TI's current one.
 */
export async function takeAttempt(sql: Sql, tiId: string, attemptToken: string, agentId: string): Promise<boolean> {
  const [row] = await sql`
    update task_instances set agent_id = ${agentId}
    where id = ${tiId} and attempt_token = ${attemptToken}::uuid and (agent_id is null or agent_id = ${agentId})
      and state in (${inlineLiterals(sql, ACTIVE_TI_STATES)})
    returning id`;
  return row !== undefined;
}
