import { CLAIMED_TI_STATES } from '../../core/states.js';
import { inlineLiterals } from '../inline-literals.js';
import type { Sql } from '../sql.js';

/** The task instances claimed for an agent and not yet delivered to another of its processes, oldest first. */
export async function undeliveredClaims(sql: Sql, agentId: string, incarnationId: string): Promise<string[]> {
  const rows = await sql<{ id: string }[]>`
    select id from task_instances where agent_id = ${agentId} and state in (${inlineLiterals(sql, CLAIMED_TI_STATES)})
      and (delivered_to is null or delivered_to = ${incarnationId}::uuid)
    order by id`;
  return rows.map((r) => r.id);
}
