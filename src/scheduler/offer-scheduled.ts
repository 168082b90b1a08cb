import { taskPriority } from '../core/dag-spec.js';
import { specTaskId } from '../core/map-spec.js';
import type { WorkItem } from '../core/work-item.js';
import { runTraceOf } from '../db/runs.js';
import type { AppliedPlans } from '../db/plan/run-plan.js';
import type { PlannerTi } from '../db/tis.js';
import type { SchedulerContext } from './context.js';
import type { DecidedRun } from './decide-run.js';
import { isPlannerReason } from './is-planner-reason.js';

/** A scheduled TI to offer, with what decides its reason once the dispatcher has answered. */
export interface PendingOffer {
  item: WorkItem;
  ti: PlannerTi;
  /** Moved to scheduled in this step: its reason was cleared by the move. */
  justScheduled: boolean;
  priority: number;
}

/**
 * The scheduled TIs of a run whose writes applied, to offer: the ones just scheduled (with their
 * claim, if claimed with the move) and those a full queue refused before. TIs that cannot be
 * offered (a paused DAG, no such executor here) get their reason in `reasons` instead.
 */
export function scheduledOffers(
  ctx: SchedulerContext,
  d: DecidedRun,
  applied: AppliedPlans,
  reasons: Map<string, string | null>,
): PendingOffer[] {
  const { run, tis, byTask } = d;
  if (run.dag_paused) {
    for (const ti of tis)
      if (ti.state === 'scheduled' && ti.pending_reason !== 'DAG_PAUSED') reasons.set(ti.id, 'DAG_PAUSED');
    return [];
  }
  // Mapped instances left unscheduled for want of room are scheduled when the pool drains.
  if (d.decision.heldForRoom) ctx.roomWaiters?.refused(run.id);
  const justScheduled = new Set<string>();
  for (const taskId of [...d.decision.schedule, ...d.decision.retry])
    if (applied.moved.has(byTask.get(taskId)!.id)) justScheduled.add(taskId);
  const scheduled = new Set(justScheduled);
  for (const ti of tis) if (ti.state === 'scheduled') scheduled.add(ti.task_id);
  const offers: PendingOffer[] = [];
  const tasks = new Map(run.spec.tasks.map((t) => [t.id, t]));
  for (const taskId of scheduled) {
    const ti = byTask.get(taskId)!;
    if (!ctx.dispatcher.executors.has(ti.executor)) {
      const reason = `NO_EXECUTOR:${ti.executor}`;
      if (ti.pending_reason !== reason) reasons.set(ti.id, reason);
      continue;
    }
    const task = tasks.get(specTaskId(taskId))!;
    const just = justScheduled.has(taskId);
    const priority = taskPriority(run.spec, task);
    offers.push({
      item: {
        tiId: ti.id,
        runId: run.id,
        dagId: run.dag_id,
        taskId,
        executor: ti.executor,
        task,
        conf: run.conf,
        logicalDate: run.logical_date,
        runTrace: runTraceOf(run),
        pendingReason: just ? null : ti.pending_reason,
        claim: just ? applied.claims.get(ti.id) : undefined,
        ...(priority !== 0 ? { priority } : {}),
      },
      ti,
      justScheduled: just,
      priority,
    });
  }
  return offers;
}

/**
 * Offers the step's TIs to the dispatcher, higher priority first (the order they are decided in
 * otherwise: oldest run first), and notes the reasons the answers call for. Returns how many the
 * dispatcher accepted.
 */
export function offerInOrder(
  ctx: SchedulerContext,
  offers: PendingOffer[],
  reasons: Map<string, string | null>,
): number {
  let accepted = 0;
  // Array.prototype.sort is stable: equal priorities keep their order.
  for (const { item, ti, justScheduled } of [...offers].sort((a, b) => b.priority - a.priority)) {
    const outcome = ctx.dispatcher.offer(item);
    if (outcome === 'accepted') accepted++;
    // A full queue says so; an accepted offer clears only that reason (a dispatcher may set its
    // own, e.g. NO_AGENT_WITH_LABELS, which must not flap every step).
    if (outcome === 'full') {
      ctx.roomWaiters?.refused(item.runId);
      if (ti.pending_reason !== ctx.dispatcher.waitReason) reasons.set(ti.id, ctx.dispatcher.waitReason);
    }
    if (outcome === 'accepted' && isPlannerReason(ti.pending_reason) && !justScheduled) reasons.set(ti.id, null);
  }
  return accepted;
}
