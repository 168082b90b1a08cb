import { RUN_END_FROM, SUCCEEDED_TI_STATES, UNSETTLED_TI_STATES } from '../../core/states.js';
import { EVENT_KIND, runEvents } from '../events/record-events.js';
import { inlineLiterals } from '../inline-literals.js';
import type { Sql } from '../sql.js';

const UNSETTLED = UNSETTLED_TI_STATES as string[];

/** Where a bounded look for orphaned runs goes on from: after this run id ('0': the oldest). */
export interface OrphanScan {
  after: string;
  /** At most this many running runs are looked at. */
  runs: number;
}

/**
 * Running runs with nothing left in flight — every TI terminal or never started — that have been
 * in that state for longer than the threshold (measured from the last TI's end, or the run's
 * start). Normally the planner finalizes such a run within a step; these are the ones it missed.
 * With `scan`, only the next `scan.runs` running runs after `scan.after` are looked at (a sweep,
 * so a step's cost does not grow with the number of running runs), and `next` says where the
 * next look goes on from ('0' once the sweep has gone round).
 */
export async function orphanRuns(
  sql: Sql,
  thresholdMs: number,
  limit: number,
  scan?: OrphanScan,
): Promise<{ runs: { id: string; dag_id: string }[]; next: string }> {
  const window = scan
    ? sql`(select id from dag_runs where state in (${inlineLiterals(sql, RUN_END_FROM)}) and id >
      ${scan.after}::bigint order by id limit ${scan.runs})`
    : sql`(select id from dag_runs where state in (${inlineLiterals(sql, RUN_END_FROM)}))`;
  const rows = await sql<{ id: string | null; dag_id: string | null; scanned: number; last: string | null }[]>`
    with s as materialized ${window},
    found as (
      select r.id, r.dag_id from s join dag_runs r on r.id = s.id
      where r.state in (${inlineLiterals(sql, RUN_END_FROM)})
        and not exists (select 1 from task_instances t where t.run_id = r.id and t.state = any(${UNSETTLED}::text[]))
        and greatest(r.started_at, r.reopened_at, (select max(t.ended_at) from task_instances t where t.run_id = r.id))
            < now() - ${thresholdMs} * interval '1 millisecond'
        -- A paused DAG's tasks wait in 'none' on purpose: that is not an orphan.
        and not exists (select 1 from dags d where d.dag_id = r.dag_id and d.paused)
      order by r.id
      limit ${limit})
    select id, dag_id, 0 as scanned, null as last from found
    union all
    select null, null, (select count(*)::int from s), (select max(id)::text from s)`;
  const tally = rows[rows.length - 1]!;
  const runs = rows.slice(0, -1).map((r) => ({ id: r.id!, dag_id: r.dag_id! }));
  return { runs, next: scan && tally.scanned >= scan.runs && tally.last !== null ? tally.last : '0' };
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
                                  and t.state not in (${inlineLiterals(sql, SUCCEEDED_TI_STATES)})) then
                                    'failed' else 'success' end,
        ended_at = now(), settled_at = coalesce(settled_at, now())
      where r.id = ${runId} and r.state in (${inlineLiterals(sql, RUN_END_FROM)})
        and not exists (select 1 from task_instances t where t.run_id = r.id and t.state = any(${UNSETTLED}::text[]))
        -- Re-checked in the write: a run cleared or unpaused since the read is left alone.
        and greatest(r.started_at, r.reopened_at, (select max(t.ended_at) from task_instances t where t.run_id = r.id))
            < now() - ${thresholdMs} * interval '1 millisecond'
        and not exists (select 1 from dags d where d.dag_id = r.dag_id and d.paused)
      returning r.id, r.state),
    ev as (${runEvents(
      sql,
      EVENT_KIND.runState,
      sql`moved`,
      sql`jsonb_build_object('to', state, 'reason', 'orphan_reaped')`,
    )})
    select state from moved`;
  return row?.state ?? null;
}
