import type { Sql, TxSql } from './sql.js';

/**
 * running → success | failed, only if every task instance of the run is terminal at the moment
 * of the write (checked in the same statement), so a planner working from a stale read can never
 * finalize a run that still has work in flight.
 *
 * The run row is locked first, in a statement of its own: a clear (clear-task-instance.ts) holds
 * that lock while it turns ended task instances back into `none`. Checked in one statement, the
 * TI check would read the snapshot taken before the clear committed, and the update, re-checked
 * against the run row only, would end the run over the task instances the clear re-opened.
 */
export async function finalizeRun(sql: Sql | TxSql, runId: string, outcome: 'success' | 'failed'): Promise<boolean> {
  const write = async (tx: Sql | TxSql): Promise<boolean> => {
    const [locked] = await tx`select 1 from dag_runs where id = ${runId} and state = 'running' for update`;
    if (!locked) return false;
    const rows = await tx`
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
  };
  // A transaction sql has no begin: the caller's transaction holds the lock until it commits.
  return 'begin' in sql && typeof sql.begin === 'function' ? (sql as Sql).begin(write) : write(sql);
}
