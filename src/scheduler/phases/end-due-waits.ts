import { endDueWaits } from '../../db/waits/end-due-waits.js';
import type { SchedulerContext } from '../context.js';

/** At most this many waits past their deadline are ended per step; the rest in the next. */
const MAX_DUE_WAITS = 500;

export interface EndDueWaitsResult {
  ended: number;
  /** The runs of the waits it ended: they have moves to decide now. */
  runIds: string[];
}

/**
 * Phase 5: waits and approvals past their deadline end with their `on_timeout` outcome, in one
 * statement that reads only the due ones by their index: open waits that are not due cost the step
 * nothing, however many there are.
 */
export async function endDueWaitsPhase(ctx: SchedulerContext): Promise<EndDueWaitsResult> {
  const ended = await endDueWaits(ctx.sql, MAX_DUE_WAITS);
  for (const w of ended) {
    ctx.logger.info({ tiId: w.ti_id, runId: w.run_id, taskId: w.task_id, to: w.state }, `wait ${w.task_id} timed out`);
  }
  const runIds = [...new Set(ended.map((w) => w.run_id))];
  if (runIds.length > 0) ctx.memory?.forget(runIds);
  return { ended: ended.length, runIds };
}
