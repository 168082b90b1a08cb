import { ACTIVE_RUN_STATES } from '../../core/states.js';
import { EVENT_KIND } from '../events/record-events.js';
import { inlineLiterals } from '../inline-literals.js';
import type { Sql } from '../sql.js';
import { removeRunsIn, type HistoryRowCounts } from './remove-runs.js';

export type RemoveDagOutcome =
  | { kind: 'not_found' }
  /** Runs of the DAG that have not ended (made since the caller last looked): nothing removed. */
  | { kind: 'active_runs'; runIds: string[] }
  | { kind: 'removed'; counts: HistoryRowCounts };

/**
 * Removes a DAG all of whose runs have ended: what is left of its runs and their history, its own
 * events, and the DAG row, in one transaction with the DAG row locked. A run being triggered
 * meanwhile waits on that lock (its foreign key) and then finds no DAG; one made just before is
 * seen here, and refuses the removal, so a run that could still start a task is never removed.
 * The caller has removed the bulk of the history in batches first (`removeRuns`).
 */
export async function removeDag(sql: Sql, dagId: string): Promise<RemoveDagOutcome> {
  return sql.begin(async (tx) => {
    const [dag] = await tx`select 1 from dags where dag_id = ${dagId} for update`;
    if (!dag) return { kind: 'not_found' as const };
    const runs = await tx<{ id: string; active: boolean }[]>`
      select id, state in (${inlineLiterals(tx, ACTIVE_RUN_STATES)}) as active from dag_runs where dag_id =
        ${dagId} order by id`;
    const active = runs.filter((r) => r.active).map((r) => r.id);
    if (active.length > 0) return { kind: 'active_runs' as const, runIds: active };
    const counts = await removeRunsIn(
      tx,
      runs.map((r) => r.id),
      {},
    );
    const [ev] = await tx<{ n: number }[]>`
      with e as (
        delete from events where run_id is null and kind = ${EVENT_KIND.dagApplied} and payload->>'dag_id' =
          ${dagId} returning 1)
      select count(*)::int as n from e`;
    await tx`delete from dags where dag_id = ${dagId}`;
    return { kind: 'removed' as const, counts: { ...counts, events: counts.events + ev!.n } };
  });
}
