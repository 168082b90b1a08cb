import { ACTIVE_TI_STATES } from '../../core/states.js';
import { EVENT_KIND, tiEvents } from '../events/record-events.js';
import { inlineLiterals } from '../inline-literals.js';
import type { Sql } from '../sql.js';
import { freeLostSet, lostEvent, lostReturning, lostSet } from './lost-write.js';

/**
 * Ends one attempt whose process is known gone (its pod deleted, failed or on a lost node), with
 * the reason the executor saw, as any loss ends: its retries apply and its token dies with it.
 * Guarded by try, token and an active state, so an attempt already over (its agent reported,
 * it was cancelled) is left alone. With `maxFree` (its node lost, its pod evicted) the loss
 * spends no try while the TI has had fewer than `maxFree` such losses (`freeLostSet`). Resolves the
 * run's id when this call ended it.
 */
export async function endLostAttempt(
  sql: Sql,
  a: { tiId: string; tryNumber: number; attemptToken: string },
  error: string,
  reason: string,
  maxFree: number | null = null,
): Promise<string | null> {
  const set = maxFree !== null ? freeLostSet(sql, sql`${error}`, maxFree) : lostSet(sql, sql`${error}`);
  const [row] = await sql<{ run_id: string }[]>`
    with moved as (
      update task_instances set ${set}
      where id = ${a.tiId} and try_number = ${a.tryNumber} and attempt_token = ${a.attemptToken}
        and state in (${inlineLiterals(sql, ACTIVE_TI_STATES)})
      returning ${lostReturning(sql)}),
    ev as (${tiEvents(sql, EVENT_KIND.tiState, sql`moved`, lostEvent(sql, reason))})
    select run_id from moved`;
  return row?.run_id ?? null;
}
