import { ACTIVE_TI_STATES } from '../../core/states.js';
import { lostEvent, lostReturning, lostSet } from '../attempts/lost-write.js';
import { EVENT_KIND, tiEvents } from '../events/record-events.js';
import type { Sql } from '../sql.js';
import type { StaleAttempt } from './stale-attempts.js';

export type ReapVerdict = 'up_for_retry' | 'failed' | 'skipped';

/**
 * Ends one attempt whose holder stopped heartbeating: up_for_retry (with backoff) if tries
 * remain, else failed, error `agent_lost: …`. The staleness is checked again inside the UPDATE,
 * together with the attempt's try number and token, so a heartbeat that lands between the read
 * and this write saves the attempt ('skipped'), and a newer attempt is never touched. The token is
 * cleared, as a clear does, so nothing the lost holder reports afterwards is applied.
 */
export async function reapAttempt(sql: Sql, a: StaleAttempt, thresholdMs: number): Promise<ReapVerdict> {
  const error =
    `agent_lost: no heartbeat for more than ${Math.round(thresholdMs / 1000)}s ` +
    `(last sign of life ${a.last_seen.toISOString()})`;
  const [row] = await sql<{ state: ReapVerdict }[]>`
    with moved as (
      update task_instances set ${lostSet(sql, sql`${error}`)}
      where id = ${a.id} and try_number = ${a.try_number} and attempt_token = ${a.attempt_token}
        and state = any(${ACTIVE_TI_STATES as string[]}::text[])
        and coalesce(heartbeat_at, started_at, queued_at) < now() - ${thresholdMs} * interval '1 millisecond'
      returning ${lostReturning(sql)}),
    ev as (${tiEvents(sql, EVENT_KIND.tiState, sql`moved`, lostEvent(sql, 'agent_lost'))})
    select state from moved`;
  return row?.state ?? 'skipped';
}
