import { RUN_END_FROM, TERMINAL_TI_STATES, type TiState } from '../../core/states.js';
import { EVENT_KIND, runEvents } from '../events/record-events.js';
import { inlineLiterals } from '../inline-literals.js';
import type { PendingQuery, Sql } from '../sql.js';

/** A run to end, decided from a read at `epoch`. */
export interface RunEnd {
  runId: string;
  epoch: string;
  outcome: 'success' | 'failed';
  /**
   * For an end decided ahead of a read (plan-ahead.ts, `planAhead`): every task instance's state
   * as the decision assumed it; the run ends only if the database holds each of them at the write.
   */
  expect?: { tiId: string; state: TiState }[];
}

/**
 * running → success | failed for many runs in one statement, each only if every task instance
 * of the run is terminal at the moment of the write and the run's `plan_epoch` is still the one
 * the decision was read at: a clear that re-opened task instances since (it bumps the epoch with
 * the run row locked, and Postgres re-checks the epoch on the row version the clear left) voids
 * the decision. With `expect`, the states assumed must hold too. Resolves the runs that ended.
 */
export async function finalizeRuns(sql: Sql, runs: RunEnd[]): Promise<Set<string>> {
  if (runs.length === 0) return new Set();
  return new Set((await finalizeRunsQuery(sql, runs)).map((r) => r.id));
}

/** The statement of `finalizeRuns`, not sent until awaited or `execute()`d; runs must not be empty. */
export function finalizeRunsQuery(sql: Sql, runs: RunEnd[]): PendingQuery<{ id: string }[]> {
  const expect = runs.flatMap((r) => (r.expect ?? []).map((e) => ({ runId: r.runId, ...e })));
  return sql<{ id: string }[]>`
    with want as (
      select * from unnest(${runs.map((r) => r.runId)}::bigint[], ${runs.map((r) => r.epoch)}::bigint[],
        ${runs.map((r) => r.outcome)}::text[])
        as w(run_id, epoch, outcome)),
    ${
      expect.length > 0
        ? sql`
    x as (
      select * from unnest(${expect.map((e) => e.runId)}::bigint[], ${expect.map((e) => e.tiId)}::bigint[],
        ${expect.map((e) => e.state)}::text[])
        as x(run_id, ti_id, state)),
    -- Ends decided from states assumed that do not hold: those runs are left alone.
    spoiled as (
      select x.run_id from x left join task_instances t on t.id = x.ti_id and t.run_id = x.run_id
      where t.state is distinct from x.state),`
        : sql``
    }
    -- The runs are found by their key, stated outright: joined only to the plans, Postgres may
    -- read every running run through their index and hash the batch against them (it did, with
    -- statistics and a kept plan: 0.5 ms a call at 1,000 running runs, growing with them).
    moved as (
      update dag_runs r set state = w.outcome, ended_at = now(), settled_at = coalesce(r.settled_at, now())
      from want w
      where r.id = w.run_id and r.id = any(${runs.map((r) => r.runId)}::bigint[]) and r.state in
        (${inlineLiterals(sql, RUN_END_FROM)}) and r.plan_epoch = w.epoch
        ${expect.length > 0 ? sql`and r.id not in (select run_id from spoiled)` : sql``}
        and not exists (select 1 from task_instances ti where ti.run_id = r.id
                        and ti.state <> all(${TERMINAL_TI_STATES as string[]}::text[]))
      returning r.id, r.state),
    ev as (${runEvents(sql, EVENT_KIND.runState, sql`moved`, sql`jsonb_build_object('to', state)`)})
    select id from moved`;
}
