import { MAX_MAP_ITEMS } from '../core/map-spec.js';
import { expandMap } from '../db/map/expand-map.js';
import { settleMaps } from '../db/map/settle-maps.js';
import type { AppliedPlans } from '../db/plan/run-plan.js';
import type { SchedulerContext } from './context.js';
import type { DecidedRun } from './decide-run.js';

/** Expansions under way, by the id of the task's own instance: each is sent once at a time. */
const expanding = new WeakMap<SchedulerContext, Set<string>>();

/**
 * After a step's writes: expands the mapped tasks whose trigger rule is met, and ends those whose
 * mapped instances are all done, for the runs whose plan applied (or had nothing to write). An
 * expansion (a 100,000-item insert takes seconds) is not waited for: the step goes on, and the run
 * is nudged when it is written. Its statement is guarded by the task's state, so one sent twice
 * expands once.
 */
export async function expandAndSettleMaps(
  ctx: SchedulerContext,
  decided: readonly DecidedRun[],
  applied: AppliedPlans,
): Promise<number> {
  const settle: string[] = [];
  let errors = 0;
  for (const d of decided) {
    if (d.plan && !applied.runs.has(d.run.id)) continue;
    if (d.decision.outcome) continue;
    for (const taskId of d.decision.settle) settle.push(d.byTask.get(taskId)!.id);
    for (const taskId of d.decision.expand) startExpansion(ctx, d, taskId);
  }
  if (settle.length > 0) {
    try {
      const ended = await settleMaps(ctx.sql, settle);
      // Their downstream tasks may run now.
      if (ended.length > 0) ctx.nudge?.([...new Set(ended)]);
    } catch (err) {
      errors++;
      ctx.counters.error('plan.settle-maps', err);
    }
  }
  return errors;
}

function startExpansion(ctx: SchedulerContext, d: DecidedRun, taskId: string): void {
  const ti = d.byTask.get(taskId)!;
  const task = d.run.spec.tasks.find((t) => t.id === taskId)!;
  const busy = expanding.get(ctx) ?? expanding.set(ctx, new Set()).get(ctx)!;
  if (busy.has(ti.id)) return;
  busy.add(ti.id);
  const m = task.map!;
  void expandMap(ctx.sql, {
    tiId: ti.id,
    runId: d.run.id,
    epoch: d.run.plan_epoch,
    taskId,
    upstream: m.upstream,
    path: m.path,
    maxItems: MAX_MAP_ITEMS,
  })
    .then(() => ctx.nudge?.([d.run.id]))
    .catch((err: unknown) => ctx.counters.error('plan.expand-map', err, { runId: d.run.id, taskId }))
    .finally(() => busy.delete(ti.id));
}
