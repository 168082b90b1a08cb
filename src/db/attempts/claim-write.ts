import type { Fragment, Sql } from '../sql.js';

/**
 * What a claim writes, shared by the two statements that claim (a dispatcher's `claimAttempts`,
 * and the planner's move claimed with it in `applyPlansQuery`) so a claim is defined once:
 * scheduled → queued, try_number + 1, a new random attempt token, the deterministic dispatch key,
 * the executor and agent, since when it was ready (when it was scheduled, a retry's due time, or
 * now for a move claimed with it), and the last attempt's traces cleared (its delivery to an agent
 * process among them). The SET list of an update of
 * task instance `t` from its run `r` and a row `c` with the `agent_id`; each statement keeps its
 * own guard.
 */
export function claimSet(sql: Sql, executor: Fragment): Fragment {
  return sql`
    state = 'queued', try_number = t.try_number + 1, attempt_token = gen_random_uuid(),
    dispatch_key = r.dag_id || '-' || t.run_id || '-' || t.task_id || '-' || (t.try_number + 1),
    executor = ${executor}, queued_at = now(), started_at = null, heartbeat_at = null, ended_at = null,
    exit_code = null, signal = null, error = null, pid = null, agent_id = c.agent_id, pending_reason = null,
      next_try_at = null,
    delivered_to = null,
    ready_at = case t.state when 'scheduled' then coalesce(t.ready_at, now()) when 'up_for_retry' then
      least(coalesce(t.next_try_at, now()), now()) else now() end`;
}

/** The RETURNING list of a claim: what a `Claim` is made of, and what `claimEvent` reads. */
export function claimReturning(sql: Sql): Fragment {
  return sql`t.id, t.run_id, t.task_id, t.try_number, t.max_tries, t.attempt_token, t.dispatch_key, t.agent_id`;
}

/** The events-log payload of a claim (→ queued), from a row of `claimReturning`. */
export function claimEvent(sql: Sql): Fragment {
  return sql`jsonb_build_object('task_id', task_id, 'to', 'queued', 'try', try_number, 'agent_id', agent_id)`;
}
