import { actorPayload, type WriteActor } from '../core/actor.js';
import { downstreamTaskIds } from '../core/downstream.js';
import { RUN_REOPEN_FROM, isTerminalRun, isTerminalTi, legalTiFrom } from '../core/states.js';
import { EVENT_KIND, runEvents, tiEvents } from './events/record-events.js';
import { getRun, type RunRow, type RunWithSpec } from './runs.js';
import type { Sql } from './sql.js';
import type { TiRow } from './tis.js';

/** A clear takes a task instance back to `none` only from an ended state the state table allows. */
const CLEAR_FROM = legalTiFrom('none').filter(isTerminalTi) as string[];

export type ClearOutcome =
  | { kind: 'run_not_found' }
  | { kind: 'task_not_found'; run: RunRow }
  | { kind: 'not_ended'; ti: TiRow }
  | { kind: 'cleared'; run: RunRow; cleared: TiRow[]; reopenedFrom: RunRow['state'] | null };

/**
 * Clears a task instance (retry by hand), and with `downstream` every ended task instance
 * downstream of it, in one transaction:
 * - each goes back to `none` with its try_number kept, so its next attempt is try_number + 1,
 *   and a fresh budget of retries: max_tries = try_number + retries + 1, retries read from the
 *   run's version of the DAG (a DAG applied since does not change the run);
 * - its last attempt's outcome (error, exit code, times, pid) is cleared, and so is its attempt
 *   token, so a late report of that attempt (a cancelled process still dying) is refused by the
 *   fence instead of ending the cleared TI;
 * - a run that had ended goes back to `running` (ended_at cleared; started_at kept, its first
 *   start, so its duration is the wall time from it to its last end; reopened_at now, so the
 *   orphan-run reaper measures the re-opened run from the re-open) and the scheduler plans it.
 * Every move is guarded by the state table and recorded in events.
 */
export async function clearTaskInstance(
  sql: Sql,
  req: { runId: string; taskId: string; downstream: boolean; noCache?: boolean; by?: WriteActor },
): Promise<ClearOutcome> {
  const who = actorPayload(req.by);
  return sql.begin(async (tx) => {
    // Run row first, then its TIs (the order every writer of both takes). A planner's write for
    // this run (plan/apply-plans.ts, plan/finalize-runs.ts) waits on this lock, then finds the
    // plan epoch this clear bumped and drops its decision, so a run cannot end over a task
    // instance the clear just made `none` again, nor get a stale "upstream failed".
    const [found] = await tx<RunWithSpec[]>`
      select r.*, v.spec from dag_runs r join dag_versions v on v.dag_id = r.dag_id and v.version = r.dag_version
      where r.id = ${req.runId} for update of r`;
    if (!found) return { kind: 'run_not_found' as const };
    const { spec, ...run } = found;
    if (!spec.tasks.some((t) => t.id === req.taskId)) return { kind: 'task_not_found' as const, run };

    const ids = [req.taskId, ...(req.downstream ? downstreamTaskIds(spec.tasks, req.taskId) : [])];
    const [target] = await tx<TiRow[]>`
      select * from task_instances where run_id = ${req.runId} and task_id = ${req.taskId} for update`;
    if (!target) return { kind: 'task_not_found' as const, run };
    if (!isTerminalTi(target.state)) return { kind: 'not_ended' as const, ti: target };

    const retries = new Map(spec.tasks.map((t) => [t.id, t.retries]));
    const clearedEvent = tx`jsonb_build_object('task_id', task_id, 'to', 'none', 'from', was, 'try', try_number,
      'max_tries', max_tries, 'reason', 'cleared') || ${tx.json(who as never)}`;
    const moved = await tx<(TiRow & { was: string })[]>`
      with old as (
        select t.id, t.state, r.retries from task_instances t
        join unnest(${ids}::text[], ${ids.map((id) => retries.get(id)!)}::int[]) as r(task_id, retries)
          on r.task_id = t.task_id
        where t.run_id = ${req.runId} and t.state = any(${CLEAR_FROM}::text[])
        for update of t),
      moved as (
        update task_instances t set state = 'none', max_tries = t.try_number + old.retries + 1,
          attempt_token = null, agent_id = null, pid = null, pending_reason = null, next_try_at = null,
          queued_at = null, started_at = null, heartbeat_at = null, ended_at = null, exit_code = null, signal = null,
          error = null, no_cache = ${req.noCache === true}, map_count = null
        from old where t.id = old.id
        returning t.*, old.state as was),
      -- A mapped task expands afresh from its upstream's output: its instances go, with their lines.
      unmapped as (delete from task_instances c using moved m where c.map_parent = m.id returning c.id),
      unmapped_logs as (delete from task_logs l using unmapped u where l.ti_id = u.id),
      ev as (${tiEvents(tx, EVENT_KIND.tiState, tx`moved`, clearedEvent)})
      select * from moved`;

    let reopenedFrom: RunRow['state'] | null = null;
    if (isTerminalRun(run.state)) {
      const rows = await tx`
        with moved as (
          update dag_runs set state = 'running', started_at = coalesce(started_at, now()), reopened_at = now(),
            ended_at = null, settled_at = null,
            plan_epoch = plan_epoch + 1
          where id = ${req.runId} and state = any(${RUN_REOPEN_FROM as string[]}::text[])
          returning id)
        ${runEvents(
          tx,
          EVENT_KIND.runState,
          tx`moved`,
          tx`${tx.json({ to: 'running', from: run.state, reason: 'cleared', task_id: req.taskId, ...who } as never)}`,
        )}
        returning run_id`;
      if (rows.count === 1) reopenedFrom = run.state;
    } else {
      // Not settled any more: the run has work again. The epoch tells a planner that read the run
      // before this clear that its decision is stale (runs.ts, applyPlan).
      await tx`update dag_runs set settled_at = null, plan_epoch = plan_epoch + 1 where id = ${req.runId}`;
    }

    const order = new Map(ids.map((id, i) => [id, i]));
    const cleared = moved
      .map(({ was: _, ...ti }) => ti as TiRow)
      .sort((a, b) => order.get(a.task_id)! - order.get(b.task_id)!);
    return { kind: 'cleared' as const, run: (await getRun(tx, req.runId))!, cleared, reopenedFrom };
  });
}
