import { orphanRuns, reapRun } from '../../db/reap/orphan-runs.js';
import type { SchedulerContext } from '../context.js';

/** At most this many orphaned runs are looked at per step. */
const MAX_CANDIDATES = 100;

export interface ReapRunsResult {
  candidates: number;
  finalized: number;
  errors: number;
}

/**
 * Phase 2: running runs whose task instances are all terminal (or never started) for longer than
 * the run-orphan threshold — a crash between the last TI ending and the run being finalized, or a
 * poisoned run the planner skips. Each is finalized by a guarded write, in isolation.
 */
export async function reapRuns(ctx: SchedulerContext): Promise<ReapRunsResult> {
  const result: ReapRunsResult = { candidates: 0, finalized: 0, errors: 0 };
  // Like the planner's sweep: a stretch of the running runs a step, so every one is looked at
  // within a known number of steps and a step's cost does not grow with them.
  const scan = ctx.sweep
    ? { after: ctx.sweep.orphansAfter ?? '0', runs: ctx.sweepRunsPerStep ?? ctx.maxRunsPerStep }
    : undefined;
  const { runs: candidates, next } = await orphanRuns(ctx.sql, ctx.runOrphanThresholdMs, MAX_CANDIDATES, scan);
  if (ctx.sweep) ctx.sweep.orphansAfter = next;
  result.candidates = candidates.length;
  for (const run of candidates) {
    try {
      const state = await reapRun(ctx.sql, run.id, ctx.runOrphanThresholdMs);
      if (state === null) continue;
      result.finalized++;
      ctx.logger.warn({ runId: run.id, dagId: run.dag_id, state }, `orphaned run ${run.id} finalized: ${state}`);
    } catch (err) {
      result.errors++;
      ctx.counters.error('reap-runs', err, { runId: run.id, dagId: run.dag_id });
    }
  }
  if (result.finalized > 0) ctx.counters.reaped('run', result.finalized);
  return result;
}
