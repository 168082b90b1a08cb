import { RUN_END_FROM, SUCCEEDED_TI_STATES, UNSETTLED_TI_STATES } from '../../core/states.js';
import { EVENT_KIND, runEvents } from '../events/record-events.js';
import { inlineLiterals } from '../inline-literals.js';
import type { Sql } from '../sql.js';

const UNSETTLED = UNSETTLED_TI_STATES as string[];

/**
 * Running runs with nothing left in flight — every TI terminal or never started — that have been
 * in that state for longer than the threshold (measured from the last TI's end, or the run's
 * start). Normally the planner finalizes such a run within a step; these are the ones it missed.
 */
export async function orphanRuns(sql: Sql, thresholdMs: number, limit: number): Promise<{ id: string; dag_id: string }[]> {
  return sql<{ id: string; dag_id: string }[]>`
    select r.id, r.dag_id from dag_runs r
    where r.state in (${inlineLiterals(sql, RUN_END_FROM)})
      and not exists (select 1 from task_instances t where t.run_id = r.id and t.state = any(${UNSETTLED}::text[]))
      and greatest(r.started_at, (select max(t.ended_at) from task_instances t where t.run_id = r.id))
          < now() - ${thresholdMs} * interval '1 millisecond'
      -- A paused DAG's tasks wait in 'none' on purpose: that is not an orphan.
      and not exists (select 1 from dags d where d.dag_id = r.dag_id and d.paused)
    order by r.id
    limit ${limit}`;
}

/**
 * Finalizes one orphaned run: success if every TI succeeded (or was skipped), else failed. The
 * UPDATE re-checks every condition of the read, so a run that changed since is left alone.
 */
export async function reapRun(sql: Sql, runId: string, thresholdMs: number): Promise<'success' | 'failed' | null> {
  const [row] = await sql<{ state: 'success' | 'failed' }[]>`
    with moved as (
      update dag_runs r set
        state = case when exists (select 1 from task_instances t where t.run_id = r.id
                                  and t.state not in (${inlineLiterals(sql, SUCCEEDED_TI_STATES)})) then 'failed' else 'success' end,
        ended_at = now(), settled_at = coalesce(settled_at, now())
      where r.id = ${runId} and r.state in (${inlineLiterals(sql, RUN_END_FROM)})
        and not exists (select 1 from task_instances t where t.run_id = r.id and t.state = any(${UNSETTLED}::text[]))
        -- Re-checked in the write: a run cleared or unpaused since the read is left alone.
        and greatest(r.started_at, (select max(t.ended_at) from task_instances t where t.run_id = r.id))
            < now() - ${thresholdMs} * interval '1 millisecond'
        and not exists (select 1 from dags d where d.dag_id = r.dag_id and d.paused)
      returning r.id, r.state),
    ev as (${runEvents(sql, EVENT_KIND.runState, sql`moved`, sql`jsonb_build_object('to', state, 'reason', 'orphan_reaped')`)})
    select state from moved`;
  return row?.state ?? null;
}
