import { ACTIVE_TI_STATES } from '../../core/states.js';
import { EVENT_KIND, tiEvents } from '../events/record-events.js';
import type { Fragment, Sql } from '../sql.js';
import type { StaleAttempt } from './stale-attempts.js';

export type ReapVerdict = 'up_for_retry' | 'failed' | 'skipped';

/**
 * The columns a reaper writes to end an attempt: up_for_retry with the TI's own backoff if tries
 * remain, else failed, with `error`.
 */
export const reapedEnd = (sql: Sql, error: string): Fragment => sql`
  state = case when try_number < max_tries then 'up_for_retry' else 'failed' end,
  next_try_at = case when try_number < max_tries
    then now() + least(retry_delay_ms * power(2, least(try_number - 1, 30)), max_retry_delay_ms) * interval '1 millisecond'
    end,
  -- The attempt is over: its token dies with it, so every later report of its holder (a zombie's
  -- log lines included) is refused, not only once the TI is claimed again.
  ended_at = now(), error = ${error}, pid = null, attempt_token = null`;

/**
 * Ends one attempt whose holder stopped heartbeating: up_for_retry (with backoff) if tries
 * remain, else failed, error `agent_lost: …`. The staleness is checked again inside the UPDATE,
 * together with the attempt's try number and token, so a heartbeat that lands between the read
 * and this write saves the attempt ('skipped'), and a newer attempt is never touched. The token is
 * cleared, as a clear does, so nothing the lost holder reports afterwards is applied.
 */
export async function reapAttempt(sql: Sql, a: StaleAttempt, thresholdMs: number): Promise<ReapVerdict> {
  const error = `agent_lost: no heartbeat for more than ${Math.round(thresholdMs / 1000)}s (last sign of life ${a.last_seen.toISOString()})`;
  const lostEvent = sql`jsonb_build_object('task_id', task_id, 'to', state, 'try', try_number,
    'reason', 'agent_lost', 'error', error, 'next_try_at', next_try_at)`;
  const [row] = await sql<{ state: ReapVerdict }[]>`
    with moved as (
      update task_instances set ${reapedEnd(sql, error)}
      where id = ${a.id} and try_number = ${a.try_number} and attempt_token = ${a.attempt_token}
        and state = any(${ACTIVE_TI_STATES as string[]}::text[])
        and coalesce(heartbeat_at, started_at, queued_at) < now() - ${thresholdMs} * interval '1 millisecond'
      returning id, run_id, task_id, try_number, state, error, next_try_at),
    ev as (${tiEvents(sql, EVENT_KIND.tiState, sql`moved`, lostEvent)})
    select state from moved`;
  return row?.state ?? 'skipped';
}
