import type { Fragment, Sql } from '../sql.js';

/**
 * What ending a lost attempt writes, shared by the heartbeat reaper (`reapAttempt`) and the end of
 * an attempt an agent's earlier process was given (`endAbandonedAttempts`), so a loss is defined
 * once: up_for_retry with the TI's own backoff if tries remain, else failed, with `error`; the
 * token dies with the attempt, so nothing its holder reports afterwards is applied. The SET list
 * of an update of `task_instances`; each statement keeps its own guard.
 */
export function lostSet(sql: Sql, error: Fragment): Fragment {
  return sql`
    state = case when try_number < max_tries then 'up_for_retry' else 'failed' end,
    next_try_at = case when try_number < max_tries
      then now() + least(retry_delay_ms * power(2, least(try_number - 1, 30)), max_retry_delay_ms) * interval
        '1 millisecond'
      end,
    ended_at = now(), error = ${error}, pid = null, attempt_token = null`;
}

/**
 * What ending an attempt lost through no doing of its task writes (its node lost, its pod
 * evicted), while the TI has had fewer than `maxFree` such losses: up_for_retry at once whatever
 * its tries, its tries allowed grown by one so the loss spends none (as Kubernetes Jobs'
 * podFailurePolicy `Ignore` on DisruptionTarget does not count such a pod against backoffLimit).
 * Past `maxFree` it is a loss as `lostSet` writes, its error saying that it spent a try and why.
 * Every right-hand side reads the row as it was before the update.
 */
export function freeLostSet(sql: Sql, error: Fragment, maxFree: number): Fragment {
  const free = sql`free_tries < ${maxFree}::int`;
  return sql`
    state = case when ${free} or try_number < max_tries then 'up_for_retry' else 'failed' end,
    max_tries = max_tries + case when ${free} then 1 else 0 end,
    free_tries = free_tries + case when ${free} then 1 else 0 end,
    next_try_at = case when ${free} then now() when try_number < max_tries
      then now() + least(retry_delay_ms * power(2, least(try_number - 1, 30)), max_retry_delay_ms) * interval
        '1 millisecond'
      end,
    ended_at = now(), pid = null, attempt_token = null,
    error = case when ${free} then ${error}::text
      else ${error}::text || ' (spent a try: its ' || ${maxFree}::int ||
        ' free retries for lost nodes and evictions are used, --max-free-retries)'
      end`;
}

/** The RETURNING list of a loss: what `lostEvent` reads. */
export function lostReturning(sql: Sql): Fragment {
  return sql`id, run_id, task_id, try_number, state, error, next_try_at`;
}

/** The events-log payload of a loss, `reason` naming why (`agent_lost`, `agent_restarted`). */
export function lostEvent(sql: Sql, reason: string): Fragment {
  return sql`jsonb_build_object('task_id', task_id, 'to', state, 'try', try_number,
    'reason', ${reason}::text, 'error', error, 'next_try_at', next_try_at)`;
}
