import { advanceRun, type MapRoom, type RunDecision, type TiStateView } from '../core/advance-run.js';
import { waitStart } from '../core/wait-start.js';
import type { RunPlan, TiMove } from '../db/plan/run-plan.js';
import type { ActiveRunRow } from '../db/runs.js';
import type { PlannerTi } from '../db/tis.js';

/** A run decided in memory, waiting for its writes. */
export interface DecidedRun {
  run: ActiveRunRow;
  tis: PlannerTi[];
  byTask: Map<string, PlannerTi>;
  decision: RunDecision;
  /** The run's moves (and start) to write; null: nothing to write. */
  plan: RunPlan | null;
}

/**
 * Decides one run's moves in memory from the run and its task instances as read (or as known),
 * writing nothing: the step decides from what it read, a plan ahead from what it knew. Throws when
 * the run's rules cannot be applied. `mapRoom`: how many mapped instances it may newly schedule.
 */
export function decideRun(
  run: ActiveRunRow,
  tis: PlannerTi[],
  start: boolean,
  now: Date,
  mapRoom?: MapRoom,
): DecidedRun {
  const views = new Map<string, TiStateView>(
    tis.map((ti) => [
      ti.task_id,
      { state: ti.state, nextTryAt: ti.next_try_at, pendingReason: ti.pending_reason, mapCount: ti.map_count },
    ]),
  );
  const decision: RunDecision = advanceRun(run.spec.tasks, views, now, mapRoom);
  const byTask = new Map(tis.map((ti) => [ti.task_id, ti]));
  if (run.dag_paused) {
    // A paused DAG starts nothing new: running attempts finish, failures still propagate and the
    // run can still end, but what would be scheduled waits, saying why.
    for (const taskId of [...decision.schedule, ...decision.retry, ...decision.wait, ...decision.expand]) {
      if (byTask.get(taskId)!.pending_reason !== 'DAG_PAUSED') decision.reasons.set(taskId, 'DAG_PAUSED');
      else decision.reasons.delete(taskId);
    }
    decision.schedule = [];
    decision.retry = [];
    decision.wait = [];
    decision.expand = [];
  }
  const move = (taskIds: string[], from: TiMove['from'], to: TiMove['to']): TiMove[] =>
    taskIds.map((id) => ({ tiId: byTask.get(id)!.id, from, to }));
  const specs = new Map(run.spec.tasks.map((t) => [t.id, t]));
  const moves = [
    ...move(decision.schedule, 'none', 'scheduled'),
    ...move(decision.wait, 'none', 'waiting').map((m, i) => ({
      ...m,
      wait: waitStart(specs.get(decision.wait[i]!)!, run.conf)!,
    })),
    ...move(decision.retry, 'up_for_retry', 'scheduled'),
    ...move(decision.upstreamFailed, 'none', 'upstream_failed'),
    ...move(decision.skipped, 'none', 'skipped'),
  ];
  const plan = start || moves.length > 0 ? { runId: run.id, epoch: run.plan_epoch, start, moves } : null;
  return { run, tis, byTask, decision, plan };
}
