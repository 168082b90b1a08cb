import type { SchedulerContext } from './context.js';
import { plan, type PlanResult } from './phases/plan.js';

export interface StepResult {
  plan: PlanResult | null;
  /** Phases that threw; the others still ran. */
  failedPhases: string[];
}

/**
 * One reconciliation step. Each phase is isolated: a database error in one is counted and
 * logged, and the next phase runs anyway. The step itself never throws.
 */
export async function step(ctx: SchedulerContext): Promise<StepResult> {
  const result: StepResult = { plan: null, failedPhases: [] };
  try {
    result.plan = await plan(ctx);
  } catch (err) {
    result.failedPhases.push('plan');
    ctx.counters.error('plan', err);
  }
  return result;
}
