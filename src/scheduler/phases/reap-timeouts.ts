import { overdueAttempts } from '../../db/reap/overdue-attempts.js';
import { timeOutAttempt } from '../../db/reap/time-out-attempt.js';
import type { SchedulerContext } from '../context.js';

/** At most this many overdue attempts are looked at per step. */
const MAX_CANDIDATES = 100;

export interface ReapTimeoutsResult {
  candidates: number;
  retried: number;
  failed: number;
  errors: number;
  /** Set when the phase held off because the database was unreachable too recently. */
  heldOff: boolean;
  /** The runs of the attempts it ended: they have moves to decide now. */
  runIds: string[];
}

/**
 * Phase 4: attempts still running past their timeout plus the grace (`timeoutGraceMs`): their
 * holder was told the timeout and did not enforce it. Each is ended as timed out, fenced by its
 * token (so the TI's retries apply), and only then cancelled at its holder: an attempt is never
 * stopped that the write did not end, so a stop whose record failed cannot land as a cancel. The
 * cancel is on its way before the step ends, so before the retry can be placed.
 * After a database outage it holds off as the heartbeat reaper does: an end reported in time may
 * still be on its way.
 */
export async function reapTimeouts(ctx: SchedulerContext): Promise<ReapTimeoutsResult> {
  const result: ReapTimeoutsResult = { candidates: 0, retried: 0, failed: 0, errors: 0, heldOff: false, runIds: [] };
  if (ctx.now().getTime() - ctx.health.healthySince.getTime() < ctx.heartbeatThresholdMs) {
    result.heldOff = true;
    return result;
  }
  const candidates = await overdueAttempts(ctx.sql, ctx.timeoutGraceMs, MAX_CANDIDATES);
  result.candidates = candidates.length;
  for (const c of candidates) {
    try {
      const verdict = await timeOutAttempt(ctx.sql, c, ctx.timeoutGraceMs);
      if (verdict === 'skipped') continue;
      result.runIds.push(c.run_id);
      if (verdict === 'up_for_retry') result.retried++;
      else result.failed++;
      await ctx.cancel(c.id, `timed out after ${c.timeout_ms} ms`);
      ctx.logger.warn(
        {
          tiId: c.id,
          runId: c.run_id,
          taskId: c.task_id,
          try: c.try_number,
          startedAt: c.started_at,
          timeoutMs: c.timeout_ms,
          verdict,
        },
        `task ${c.task_id} ran past its timeout and was not stopped by its holder: ${verdict}`,
      );
    } catch (err) {
      result.errors++;
      ctx.counters.error('reap-timeouts', err, { tiId: c.id, runId: c.run_id });
    }
  }
  const ended = result.retried + result.failed;
  if (ended > 0) {
    ctx.counters.reaped('ti', ended);
    ctx.counters.timedOut(ended);
  }
  return result;
}
