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
  const ok = result.outcome === 'success';
  const [row] = await sql<{ state: FinishVerdict }[]>`
    with moved as (
      update task_instances set
        state = case when ${ok} then 'success'
                     when try_number < max_tries then 'up_for_retry' else 'failed' end,
        next_try_at = case when not ${ok} and try_number < max_tries
          then now() + least(retry_delay_ms * power(2, least(try_number - 1, 30)), max_retry_delay_ms) * interval '1 millisecond'
          end,
        ended_at = now(), exit_code = ${result.exitCode}, error = ${result.error}, pid = null
      where id = ${a.tiId} and try_number = ${a.tryNumber} and attempt_token = ${a.attemptToken}
        and state = any(${ATTEMPT_END_FROM as string[]}::text[])
      returning id, run_id, task_id, try_number, state, exit_code, error, next_try_at),
    ev as (
      insert into events (run_id, ti_id, kind, payload)
      select run_id, id, 'ti.state', jsonb_build_object('task_id', task_id, 'to', state, 'try', try_number,
             'exit_code', exit_code, 'error', error, 'next_try_at', next_try_at) from moved)
    select state from moved`;
  return row?.state ?? 'rejected';
}
