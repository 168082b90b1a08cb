import { legalTiFrom } from '../../core/states.js';
import type { Claim } from '../../core/work-item.js';
import type { Sql } from '../sql.js';

const CLAIM_FROM = legalTiFrom('queued') as string[];

export type { Claim };

/**
 * Claims a scheduled task instance for a new attempt: scheduled → queued, try_number + 1, a new
 * random attempt token and the deterministic dispatch key. Resolves null when the TI is no longer
 * scheduled (another dispatcher or leader claimed it first, or it was cancelled): the caller
 * then does nothing, which is what makes a duplicate dispatch harmless.
 */
export async function claimAttempt(sql: Sql, tiId: string, executor: string, agentId: string | null = null): Promise<Claim | null> {
  return (await claimAttempts(sql, executor, [{ tiId, agentId }])).get(tiId) ?? null;
}

/**
 * Claims many task instances in one statement, each for its agent (null: not an agent's), with
 * the same row-by-row guard as a single claim. Resolves the claims made, by ti id; a TI missing
 * from the map was claimed by someone else first, or cancelled.
 */
export async function claimAttempts(sql: Sql, executor: string, claims: { tiId: string; agentId: string | null }[]): Promise<Map<string, Claim>> {
  if (claims.length === 0) return new Map();
  const rows = await sql<{ id: string; try_number: number; max_tries: number; attempt_token: string; dispatch_key: string; agent_id: string | null }[]>`
    with c as (
      select * from unnest(${claims.map((c) => c.tiId)}::bigint[], ${claims.map((c) => c.agentId) as string[]}::text[]) as c(id, agent_id)),
    claimed as (
      update task_instances ti set
        state = 'queued', try_number = ti.try_number + 1, attempt_token = gen_random_uuid(),
        dispatch_key = r.dag_id || '-' || ti.run_id || '-' || ti.task_id || '-' || (ti.try_number + 1),
        executor = ${executor}, queued_at = now(), started_at = null, heartbeat_at = null, ended_at = null,
        exit_code = null, error = null, pid = null, agent_id = c.agent_id, pending_reason = null, next_try_at = null
      from c, dag_runs r
      where ti.id = c.id and ti.state = any(${CLAIM_FROM}::text[]) and r.id = ti.run_id and r.state = 'running'
      returning ti.id, ti.run_id, ti.task_id, ti.try_number, ti.max_tries, ti.attempt_token, ti.dispatch_key, ti.agent_id),
    ev as (
      insert into events (run_id, ti_id, kind, payload)
      select run_id, id, 'ti.state', jsonb_build_object('task_id', task_id, 'to', 'queued', 'try', try_number, 'agent_id', agent_id) from claimed)
    select id, try_number, max_tries, attempt_token, dispatch_key, agent_id from claimed`;
  return new Map(
    rows.map((r) => [r.id, { tryNumber: r.try_number, maxTries: r.max_tries, attemptToken: r.attempt_token, dispatchKey: r.dispatch_key, agentId: r.agent_id }]),
  );
}
