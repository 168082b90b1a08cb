import { isConnectionError } from '../db/is-connection-error.js';
import type { SchedulerContext } from './context.js';
import type { StepTarget } from './scheduler-loop.js';
import { plan, type PlanResult } from './phases/plan.js';
import { reapHeartbeats, type ReapHeartbeatsResult } from './phases/reap-heartbeats.js';
import { reapRuns, type ReapRunsResult } from './phases/reap-runs.js';
import { reapTimeouts, type ReapTimeoutsResult } from './phases/reap-timeouts.js';
import { endDueWaitsPhase, type EndDueWaitsResult } from './phases/end-due-waits.js';
import { checkDeadlines, type CheckDeadlinesResult } from './phases/check-deadlines.js';

const PHASE_NAMES = {
  plan: 'plan',
  reapRuns: 'reap-runs',
  reapHeartbeats: 'reap-heartbeats',
  reapTimeouts: 'reap-timeouts',
  endDueWaits: 'end-due-waits',
  checkDeadlines: 'check-deadlines',
} as const;

export interface StepResult {
  plan: PlanResult | null;
  reapRuns: ReapRunsResult | null;
  reapHeartbeats: ReapHeartbeatsResult | null;
  reapTimeouts: ReapTimeoutsResult | null;
  endDueWaits: EndDueWaitsResult | null;
  checkDeadlines: CheckDeadlinesResult | null;
  /** Phases that threw; the others still ran. */
  failedPhases: string[];
}

/**
 * One reconciliation step: plan, reap orphaned runs, reap attempts whose heartbeat went stale,
 * end attempts that ran past their timeout, end waits past their deadline, mark runs past theirs (a `light`
 * step, for a nudge between ticks, only plans, and only the nudged runs when the nudges named them). Each
 * phase is isolated: an error in one is counted and logged, and the next phase runs anyway. The step itself
 * never throws.
 */
export async function step(
  ctx: SchedulerContext,
  kind: 'full' | 'light' = 'full',
  target: StepTarget = { all: true },
): Promise<StepResult> {
  const result: StepResult = {
    plan: null,
    reapRuns: null,
    reapHeartbeats: null,
    reapTimeouts: null,
    endDueWaits: null,
    checkDeadlines: null,
    failedPhases: [],
  };
  const phase = async <K extends keyof typeof PHASE_NAMES>(name: K, run: () => Promise<NonNullable<StepResult[K]>>) => {
    try {
      result[name] = (await run()) as StepResult[K];
    } catch (err) {
      result.failedPhases.push(name);
      // The database could not be reached: heartbeats could not be written either, so the
      // heartbeat reaper gives writers a full threshold once it is back. Only for connection
      // errors: a bug in one phase must not switch the reaper off for good.
      if (isConnectionError(err)) ctx.health.healthySince = ctx.now();
      ctx.counters.error(PHASE_NAMES[name], err);
    }
  };
  const everything = kind === 'full' || target.all;
  const waiting = target.all && target.asked ? 'all' : 'retries';
  await phase('plan', () =>
    plan(ctx, {
      cron: kind === 'full',
      runIds: everything ? null : target.runIds,
      queued: everything ? 0 : target.queued,
      waiting,
    }),
  );
  // A light step (a nudge between ticks) only plans: what the reapers and the cron check look
  // for depends on time passing, and the next full step comes within one tick.
  if (kind === 'light') return result;
  await phase('reapRuns', () => reapRuns(ctx));
  await phase('reapHeartbeats', () => reapHeartbeats(ctx));
  await phase('reapTimeouts', () => reapTimeouts(ctx));
  await phase('endDueWaits', () => endDueWaitsPhase(ctx));
  await phase('checkDeadlines', () => checkDeadlines(ctx));
  // The runs of ended attempts are planned at once (a retry, or the failure's consequences), not
  // when the sweep comes round to them.
  const reaped = [
    ...(result.reapHeartbeats?.runIds ?? []),
    ...(result.reapTimeouts?.runIds ?? []),
    ...(result.endDueWaits?.runIds ?? []),
  ];
  if (reaped.length > 0) ctx.nudge?.([...new Set(reaped)]);
  return result;
}
