import { endDueWaits } from '../../db/waits/end-due-waits.js';
import type { SchedulerContext } from '../context.js';

/** At most this many waits past their deadline are ended per step; the rest in the next. */
const MAX_DUE_WAITS = 500;

export interface EndDueWaitsResult {
  ended: number;
  /** Set when the phase held off because the database was unreachable too recently. */
  heldOff: boolean;
  /** The runs of the waits it ended: they have moves to decide now. */
  runIds: string[];
}

/**
 * Phase 5: waits and approvals past their deadline end with their `on_timeout` outcome, in one
 * statement that reads only the due ones by their index: open waits that are not due cost the step
 * nothing, however many there are. After a database outage it holds off as the attempt reapers do:
 * an event or an approval its sender retries once the database is back may still be on its way.
 */
export async function endDueWaitsPhase(ctx: SchedulerContext): Promise<EndDueWaitsResult> {
  if (ctx.now().getTime() - ctx.health.healthySince.getTime() < ctx.heartbeatThresholdMs) {
    return { ended: 0, heldOff: true, runIds: [] };
  }
  const ended = await endDueWaits(ctx.sql, MAX_DUE_WAITS);
  for (const w of ended) {
    ctx.logger.info({ tiId: w.ti_id, runId: w.run_id, taskId: w.task_id, to: w.state }, `wait ${w.task_id} timed out`);
  }
  const runIds = [...new Set(ended.map((w) => w.run_id))];
  if (runIds.length > 0) ctx.memory?.forget(runIds);
  return { ended: ended.length, heldOff: false, runIds };
}
