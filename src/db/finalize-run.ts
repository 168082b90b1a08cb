import type { Sql, TxSql } from './sql.js';

/**
 * running → success | failed, only if every task instance of the run is terminal at the moment
 * of the write (checked in the same statement), so a planner working from a stale read can never
 * finalize a run that still has work in flight.
 */
export async function finalizeRun(sql: Sql | TxSql, runId: string, outcome: 'success' | 'failed'): Promise<boolean> {
  const rows = await sql`
    with moved as (
      update dag_runs r set state = ${outcome}, ended_at = now(), settled_at = coalesce(settled_at, now())
      where r.id = ${runId} and r.state = 'running'
        and not exists (select 1 from task_instances ti where ti.run_id = r.id
                        and ti.state not in ('success', 'failed', 'upstream_failed', 'skipped', 'cancelled'))
      returning id)
    insert into events (run_id, kind, payload)
    select id, 'run.state', jsonb_build_object('to', ${outcome}::text) from moved
    returning run_id`;
  return rows.count === 1;
}
