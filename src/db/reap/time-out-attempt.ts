import { STARTED_TI_STATES } from '../../core/states.js';
import { EVENT_KIND, tiEvents } from '../events/record-events.js';
import { inlineLiterals } from '../inline-literals.js';
import type { Sql } from '../sql.js';
import type { OverdueAttempt } from './overdue-attempts.js';
import { lostEvent, lostReturning, lostSet } from '../attempts/lost-write.js';
import type { ReapVerdict } from './reap-attempt.js';

/**
 * Ends one attempt that ran past its timeout plus the grace, as its holder should have: up_for_retry
 * (with backoff) if tries remain, else failed, error `timed out …` as a holder's own timeout
 * reads. Fenced by try number and token, and the overrun is checked again in the write, so an end
 * the holder reported meanwhile stands ('skipped'). The token is cleared: nothing the holder
 * reports afterwards is applied.
 */
export async function timeOutAttempt(sql: Sql, a: OverdueAttempt, graceMs: number): Promise<ReapVerdict> {
  const error =
    `timed out after ${a.timeout_ms} ms (ended by the control plane: ` +
    `still running ${graceMs} ms past the timeout)`;
  const [row] = await sql<{ state: ReapVerdict }[]>`
    with moved as (
      update task_instances set ${lostSet(sql, sql`${error}`)}
      where id = ${a.id} and try_number = ${a.try_number} and attempt_token = ${a.attempt_token}
        and state in (${inlineLiterals(sql, STARTED_TI_STATES)}) and timeout_ms is not null
        and started_at < now() - (timeout_ms + ${graceMs}) * interval '1 millisecond'
      returning ${lostReturning(sql)}),
    ev as (${tiEvents(sql, EVENT_KIND.tiState, sql`moved`, lostEvent(sql, 'timed_out'))})
    select state from moved`;
  return row?.state ?? 'skipped';
}
