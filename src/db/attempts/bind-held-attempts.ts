import { ACTIVE_TI_STATES } from '../../core/states.js';
import { inlineLiterals } from '../inline-literals.js';
import type { Sql } from '../sql.js';

/**
 * Of the attempts an agent process says it holds, the tokens still current on that agent, each now
 * bound to this process (`delivered_to`): one that outlived its agent's restart, re-attached by the
 * new process, is this process's from here on.
 */
export async function bindHeldAttempts(
  sql: Sql,
  agentId: string,
  incarnationId: string,
  refs: { tiId: string; tryNumber: number; attemptToken: string }[],
): Promise<Set<string>> {
  if (refs.length === 0) return new Set();
  const rows = await sql<{ token: string }[]>`
    update task_instances t set delivered_to = ${incarnationId}::uuid
    from unnest(${refs.map((r) => r.tiId)}::bigint[], ${refs.map((r) => r.tryNumber)}::int[],
                ${refs.map((r) => r.attemptToken)}::uuid[]) as h(id, try, token)
    where t.id = h.id and t.try_number = h.try and t.attempt_token = h.token
      and t.agent_id = ${agentId} and t.state in (${inlineLiterals(sql, ACTIVE_TI_STATES)})
    returning t.attempt_token as token`;
  return new Set(rows.map((r) => r.token));
}
