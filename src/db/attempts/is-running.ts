import { STARTED_TI_STATES } from '../../core/states.js';
import { inlineLiterals } from '../inline-literals.js';
import type { Sql } from '../sql.js';

/** The attempt (ti, try, token) has started and not ended, and, when `agentId` is given, on that agent. */
export async function isRunning(
  sql: Sql,
  ref: { tiId: string; tryNumber: number; attemptToken: string },
  agentId?: string,
): Promise<boolean> {
  const onAgent = agentId === undefined ? sql`` : sql`and agent_id = ${agentId}`;
  const [row] = await sql`
    select 1 from task_instances where id = ${ref.tiId} and try_number = ${ref.tryNumber}
      and attempt_token = ${ref.attemptToken} and state in (${inlineLiterals(sql, STARTED_TI_STATES)}) ${onAgent}`;
  return row !== undefined;
}
