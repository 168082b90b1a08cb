import type { AttemptResult } from '../../core/attempt.js';
import { ATTEMPT_END_FROM, legalTiFrom } from '../../core/states.js';
import type { Sql } from '../sql.js';

export type FinishVerdict = 'success' | 'failed' | 'up_for_retry' | 'cancelled' | 'rejected';

/**
 * Records the end of an attempt, fenced by try number and token: a report for a superseded
 * attempt changes nothing and resolves 'rejected'. A failure with tries left becomes
 * up_for_retry with an exponential backoff (retry_delay · 2^(try−1), capped) computed from the
 * TI's own columns, so the decision and the write are one statement.
 */
export async function finishAttempt(
  sql: Sql,
  a: { tiId: string; tryNumber: number; attemptToken: string },
  result: AttemptResult,
): Promise<FinishVerdict> {
  if (result.outcome === 'superseded') return 'rejected';
  if (result.outcome === 'cancelled') {
    // The run or TI was cancelled first (that is what stopped the process): keep the state,
    // record how the process ended.
    const from = [...legalTiFrom('cancelled'), 'cancelled'];
    const rows = await sql`
      update task_instances set state = 'cancelled', ended_at = coalesce(ended_at, now()),
        exit_code = ${result.exitCode}, error = coalesce(error, ${result.error}), pid = null
      where id = ${a.tiId} and try_number = ${a.tryNumber} and attempt_token = ${a.attemptToken}
        and state = any(${from}::text[])`;
    return rows.count === 1 ? 'cancelled' : 'rejected';
  }
  const [row] = await finishAttempts(sql, [{ ...a, result }]);
  return row?.state ?? 'rejected';
}

/** The attempts `finishAttempts` ended, with the state each ended in. */
export type FinishedRow = { id: string; try_number: number; token: string; run_id: string; state: Exclude<FinishVerdict, 'cancelled' | 'rejected'> };

/**
 * Records the end of many attempts in one statement — success, or failed / up_for_retry by the
 * TI's own tries and backoff — each only if it is still the current attempt (fenced by try number
 * and token), each move in the events log. Cancelled and superseded ends go through
 * `finishAttempt`, which has its own rules. Resolves the rows ended.
 */
export function finishAttempts(sql: Sql, ends: { tiId: string; tryNumber: number; attemptToken: string; result: AttemptResult }[]) {
  return sql<FinishedRow[]>`
    with r as (
      select * from unnest(${ends.map((o) => o.tiId)}::bigint[], ${ends.map((o) => o.tryNumber)}::int[],
                           ${ends.map((o) => o.attemptToken)}::uuid[], ${ends.map((o) => (o.result.outcome === 'success' ? 'true' : 'false'))}::text[]::bool[],
                           ${ends.map((o) => o.result.exitCode) as number[]}::int[], ${ends.map((o) => o.result.error) as string[]}::text[])
        as r(id, try, token, ok, exit_code, error)),
    moved as (
      update task_instances t set
        state = case when r.ok then 'success' when t.try_number < t.max_tries then 'up_for_retry' else 'failed' end,
        next_try_at = case when not r.ok and t.try_number < t.max_tries
          then now() + least(t.retry_delay_ms * power(2, least(t.try_number - 1, 30)), t.max_retry_delay_ms) * interval '1 millisecond'
          end,
        ended_at = now(), exit_code = r.exit_code, error = r.error, pid = null
      from r
      where t.id = r.id and t.try_number = r.try and t.attempt_token = r.token and t.state = any(${ATTEMPT_END_FROM as string[]}::text[])
      returning t.id, t.run_id, t.task_id, t.try_number, t.state, t.exit_code, t.error, t.next_try_at, t.attempt_token),
    ev as (
      insert into events (run_id, ti_id, kind, payload)
      select run_id, id, 'ti.state', jsonb_build_object('task_id', task_id, 'to', state, 'try', try_number,
             'exit_code', exit_code, 'error', error, 'next_try_at', next_try_at) from moved)
    select id, try_number, attempt_token as token, run_id, state from moved`;
}
