import { actorPayload, type WriteActor } from '../core/actor.js';
import { legalTiFrom } from '../core/states.js';
import { EVENT_KIND, tiEvents } from './events/record-events.js';
import { inlineLiterals } from './inline-literals.js';
import { RUN_VIEW_COLUMNS, getRunView, transitionRun, type RunView } from './runs.js';
import type { Sql } from './sql.js';

const CANCEL_FROM = legalTiFrom('cancelled');

export type CancelOutcome =
  | { kind: 'not_found' }
  | { kind: 'already_ended'; run: RunView }
  | { kind: 'cancelled'; run: RunView; stoppedTiIds: string[] };

/**
 * Cancels a run and every task instance of it that has not ended, in one transaction. Returns
 * the TIs that may hold a live process (queued/running), so their holder can be told to stop them
 * (its next heartbeat, which no longer matches a running attempt, would tell it too).
 */
export async function cancelRun(sql: Sql, runId: string, by?: WriteActor): Promise<CancelOutcome> {
  const who = actorPayload(by);
  return sql.begin(async (tx) => {
    const [locked] = await tx<RunView[]>`select ${tx(RUN_VIEW_COLUMNS)} from dag_runs where id = ${runId} for update`;
    if (!locked) return { kind: 'not_found' as const };
    if (!(await transitionRun(tx, runId, 'cancelled', who))) return { kind: 'already_ended' as const, run: locked };
    const rows = await tx<{ id: string; was: string }[]>`
      with old as (
        select id, state from task_instances
        where run_id = ${runId} and state in (${inlineLiterals(tx, CANCEL_FROM)})
        for update),
      moved as (
        update task_instances t set state = 'cancelled', ended_at = now(),
          pending_reason = null, error = coalesce(t.error, 'run cancelled')
        from old where t.id = old.id
        returning t.id, t.run_id, t.task_id, t.try_number, old.state as was),
      ev as (${tiEvents(
        tx,
        EVENT_KIND.tiState,
        tx`moved`,
        tx`jsonb_build_object('task_id', task_id, 'to', 'cancelled', 'try', try_number) || ${tx.json(who as never)}`,
      )})
      select id, was from moved`;
    const run = (await getRunView(tx, runId))!;
    return {
      kind: 'cancelled' as const,
      run,
      stoppedTiIds: rows.filter((r) => r.was === 'queued' || r.was === 'running').map((r) => r.id),
    };
  });
}
