import { STARTED_RUN_STATES, legalTiFrom } from '../../core/states.js';
import type { Claim } from '../../core/work-item.js';
import { EVENT_KIND, tiEvents } from '../events/record-events.js';
import { inlineLiterals } from '../inline-literals.js';
import type { Sql } from '../sql.js';
import { claimEvent, claimReturning, claimSet } from './claim-write.js';

const CLAIM_FROM = legalTiFrom('queued') as string[];

export type { Claim };

/**
 * Claims a scheduled task instance for a new attempt: scheduled → queued, try_number + 1, a new
 * random attempt token and the deterministic dispatch key. Resolves null when the TI is no longer
 * scheduled (another dispatcher or leader claimed it first, or it was cancelled): the caller
 * then does nothing, which is what makes a duplicate dispatch harmless.
 */
export async function claimAttempt(
  sql: Sql,
  tiId: string,
  executor: string,
  agentId: string | null = null,
): Promise<Claim | null> {
  return (await claimAttempts(sql, executor, [{ tiId, agentId }])).get(tiId) ?? null;
}

/**
 * Claims many task instances in one statement, each for its agent (null: not an agent's), with
 * the same row-by-row guard as a single claim. Resolves the claims made, by ti id; a TI missing
 * from the map was claimed by someone else first, or cancelled.
 */
export async function claimAttempts(
  sql: Sql,
  executor: string,
  claims: { tiId: string; agentId: string | null }[],
): Promise<Map<string, Claim>> {
  if (claims.length === 0) return new Map();
  const rows = await sql<
    {
      id: string;
      try_number: number;
      max_tries: number;
      attempt_token: string;
      dispatch_key: string;
      agent_id: string | null;
    }[]
  >`
    with c as (
      select * from unnest(${claims.map((c) => c.tiId)}::bigint[],
        ${claims.map((c) => c.agentId) as string[]}::text[]) as c(id, agent_id)),
    claimed as (
      update task_instances t set ${claimSet(sql, sql`${executor}`)}
      from c, dag_runs r
      where t.id = c.id and t.state = any(${CLAIM_FROM}::text[]) and r.id = t.run_id and r.state in
        (${inlineLiterals(sql, STARTED_RUN_STATES)})
      returning ${claimReturning(sql)}),
    ev as (${tiEvents(sql, EVENT_KIND.tiState, sql`claimed`, claimEvent(sql))})
    select id, try_number, max_tries, attempt_token, dispatch_key, agent_id from claimed`;
  return new Map(
    rows.map((r) => [
      r.id,
      {
        tryNumber: r.try_number,
        maxTries: r.max_tries,
        attemptToken: r.attempt_token,
        dispatchKey: r.dispatch_key,
        agentId: r.agent_id,
      },
    ]),
  );
}
