import { legalTiFrom } from '../../core/states.js';
import type { Sql } from '../sql.js';

const CLAIM_FROM = legalTiFrom('queued') as string[];

export interface Claim {
  tryNumber: number;
  maxTries: number;
  attemptToken: string;
  dispatchKey: string;
}

/**
 * Claims a scheduled task instance for a new attempt: scheduled → queued, try_number + 1, a new
 * random attempt token and the deterministic dispatch key. Resolves null when the TI is no longer
 * scheduled (another dispatcher or leader claimed it first, or it was cancelled): the caller
 * then does nothing, which is what makes a duplicate dispatch harmless.
 */
export async function claimAttempt(sql: Sql, tiId: string, executor: string, agentId: string | null = null): Promise<Claim | null> {
  const [row] = await sql<{ try_number: number; max_tries: number; attempt_token: string; dispatch_key: string }[]>`
    with claimed as (
      update task_instances ti set
        state = 'queued', try_number = ti.try_number + 1, attempt_token = gen_random_uuid(),
        dispatch_key = r.dag_id || '-' || ti.run_id || '-' || ti.task_id || '-' || (ti.try_number + 1),
        executor = ${executor}, queued_at = now(), started_at = null, heartbeat_at = null, ended_at = null,
        exit_code = null, error = null, pid = null, agent_id = ${agentId}, pending_reason = null, next_try_at = null
      from dag_runs r
      where ti.id = ${tiId} and ti.state = any(${CLAIM_FROM}::text[]) and r.id = ti.run_id and r.state = 'running'
      returning ti.id, ti.run_id, ti.task_id, ti.try_number, ti.max_tries, ti.attempt_token, ti.dispatch_key),
    ev as (
      insert into events (run_id, ti_id, kind, payload)
      select run_id, id, 'ti.state', jsonb_build_object('task_id', task_id, 'to', 'queued', 'try', try_number, 'agent_id', ${agentId}::text) from claimed)
    select try_number, max_tries, attempt_token, dispatch_key from claimed`;
  if (!row) return null;
  return { tryNumber: row.try_number, maxTries: row.max_tries, attemptToken: row.attempt_token, dispatchKey: row.dispatch_key };
}
