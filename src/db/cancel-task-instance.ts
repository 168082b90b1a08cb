import { actorPayload, type WriteActor } from '../core/actor.js';
import { ACTIVE_TI_STATES, legalTiFrom, type TiState } from '../core/states.js';
import { EVENT_KIND, tiEvents } from './events/record-events.js';
import type { Sql } from './sql.js';
import type { TiRow } from './tis.js';

const CANCEL_FROM = legalTiFrom('cancelled') as string[];

export const CANCELLED_BY_USER = 'cancelled by user';

export type CancelTiOutcome =
  | { kind: 'run_not_found' }
  | { kind: 'task_not_found' }
  | { kind: 'already_ended'; ti: TiRow }
  | { kind: 'cancelled'; ti: TiRow; was: TiState; mayHoldProcess: boolean };

/**
 * Cancels one task instance that has not ended (guarded by the state table, with an event). The
 * run is left to its trigger rules: the planner treats the cancelled TI as failed upstream.
 * `mayHoldProcess` is true when it was queued or running, so its holder must be told to stop the
 * process (its next heartbeat, which no longer matches a running attempt, would tell it too).
 */
export async function cancelTaskInstance(
  sql: Sql,
  runId: string,
  taskId: string,
  by?: WriteActor,
): Promise<CancelTiOutcome> {
  return sql.begin(async (tx) => {
    const cancelledEvent = tx`jsonb_build_object('task_id', task_id, 'to', 'cancelled', 'from', was, 'try', try_number,
      'reason', ${CANCELLED_BY_USER}::text) || ${tx.json(actorPayload(by) as never)}`;
    const [moved] = await tx<(TiRow & { was: TiState })[]>`
      with old as (
        select id, state from task_instances
        where run_id = ${runId} and task_id = ${taskId} and state = any(${CANCEL_FROM}::text[])
        for update),
      moved as (
        update task_instances t set state = 'cancelled', ended_at = now(), error = ${CANCELLED_BY_USER},
          pending_reason = null, next_try_at = null
        from old where t.id = old.id
        returning t.*, old.state as was),
      ev as (${tiEvents(tx, EVENT_KIND.tiState, tx`moved`, cancelledEvent)})
      select * from moved`;
    if (moved) {
      const { was, ...ti } = moved;
      return { kind: 'cancelled' as const, ti: ti as TiRow, was, mayHoldProcess: ACTIVE_TI_STATES.includes(was) };
    }
    const [ti] = await tx<TiRow[]>`select * from task_instances where run_id = ${runId} and task_id = ${taskId}`;
    if (ti) return { kind: 'already_ended' as const, ti };
    const [run] = await tx`select 1 from dag_runs where id = ${runId}`;
    return run ? { kind: 'task_not_found' as const } : { kind: 'run_not_found' as const };
  });
}
