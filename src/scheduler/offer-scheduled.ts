import type { WorkItem } from '../core/work-item.js';
import type { AppliedPlans } from '../db/plan/run-plan.js';
import type { SchedulerContext } from './context.js';
import type { DecidedRun } from './decide-run.js';
import { isPlannerReason } from './is-planner-reason.js';

/**
 * Offers every scheduled TI of a run whose writes applied: the ones just scheduled (with their
 * claim, if claimed with the move) and those a full queue refused before. The reasons to write
 * go in `reasons`. Returns how many the dispatcher accepted.
 */
export function offerScheduled(ctx: SchedulerContext, d: DecidedRun, applied: AppliedPlans, reasons: Map<string, string | null>): number {
  const { run, tis, byTask } = d;
  if (run.dag_paused) {
    for (const ti of tis) if (ti.state === 'scheduled' && ti.pending_reason !== 'DAG_PAUSED') reasons.set(ti.id, 'DAG_PAUSED');
    return 0;
  }
  const justScheduled = new Set<string>();
  for (const taskId of [...d.decision.schedule, ...d.decision.retry]) if (applied.moved.has(byTask.get(taskId)!.id)) justScheduled.add(taskId);
  const scheduled = new Set(justScheduled);
  for (const ti of tis) if (ti.state === 'scheduled') scheduled.add(ti.task_id);
  let offered = 0;
  const tasks = new Map(run.spec.tasks.map((t) => [t.id, t]));
  for (const taskId of scheduled) {
    const ti = byTask.get(taskId)!;
    if (!ctx.dispatcher.executors.has(ti.executor)) {
      const reason = `NO_EXECUTOR:${ti.executor}`;
      if (ti.pending_reason !== reason) reasons.set(ti.id, reason);
      continue;
    }
    const item: WorkItem = {
      tiId: ti.id,
      runId: run.id,
      dagId: run.dag_id,
      taskId,
      executor: ti.executor,
      task: tasks.get(taskId)!,
      conf: run.conf,
      logicalDate: run.logical_date,
      // A TI moved to scheduled in this step had its reason cleared by the move.
      pendingReason: justScheduled.has(taskId) ? null : ti.pending_reason,
      claim: justScheduled.has(taskId) ? applied.claims.get(ti.id) : undefined,
    };
    const outcome = ctx.dispatcher.offer(item);
    if (outcome === 'accepted') offered++;
    // A full queue says so; an accepted offer clears only that reason (a dispatcher may set its
    // own, e.g. NO_AGENT_WITH_LABELS, which must not flap every step).
    if (outcome === 'full') {
      ctx.roomWaiters?.refused(run.id);
      if (ti.pending_reason !== 'DISPATCH_QUEUE_FULL') reasons.set(ti.id, 'DISPATCH_QUEUE_FULL');
    }
    if (outcome === 'accepted' && isPlannerReason(ti.pending_reason) && !justScheduled.has(taskId)) reasons.set(ti.id, null);
  }
  return offered;
}
