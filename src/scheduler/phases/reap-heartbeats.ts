import { reapAttempt } from '../../db/reap/reap-attempt.js';
import { staleAttempts } from '../../db/reap/stale-attempts.js';
import type { SchedulerContext } from '../context.js';

/** At most this many stale attempts are looked at per step. */
const MAX_CANDIDATES = 100;

export interface ReapHeartbeatsResult {
  candidates: number;
  retried: number;
  failed: number;
  errors: number;
  /** Stale in the database but alive in this replica, so left alone. */
  heldLive: number;
  /** Set when the phase held off because the database was unreachable too recently. */
  heldOff: boolean;
  /** The runs of the attempts it ended: they have moves to decide now. */
  runIds: string[];
}

/**
 * Phase 3: attempts whose holder stopped heartbeating. Moves `running|queued → up_for_retry`
 * (tries left) or `failed` (none left, reason agent_lost), only on a positive signal: the last
 * sign of life is older than the threshold, re-checked in the write itself. Each candidate is
 * isolated; one that fails to write does not stop the others.
 */
export async function reapHeartbeats(ctx: SchedulerContext): Promise<ReapHeartbeatsResult> {
  const result: ReapHeartbeatsResult = {
    candidates: 0,
    retried: 0,
    failed: 0,
    errors: 0,
    heldLive: 0,
    heldOff: false,
    runIds: [],
  };
  if (ctx.now().getTime() - ctx.health.healthySince.getTime() < ctx.heartbeatThresholdMs) {
    result.heldOff = true;
    return result;
  }
  const candidates = await staleAttempts(ctx.sql, ctx.heartbeatThresholdMs, MAX_CANDIDATES);
  result.candidates = candidates.length;
  for (const c of candidates) {
    // A positive sign of life beats a stale column: the attempt's process runs in this very
    // replica (its heartbeat writes were lost to a database outage). Never reap it.
    if (ctx.dispatcher.holdsLive(c.id, c.attempt_token)) {
      result.heldLive++;
      continue;
    }
    try {
      const verdict = await reapAttempt(ctx.sql, c, ctx.heartbeatThresholdMs);
      if (verdict === 'skipped') continue;
      result.runIds.push(c.run_id);
      if (verdict === 'up_for_retry') result.retried++;
      else result.failed++;
      ctx.logger.warn(
        { tiId: c.id, runId: c.run_id, taskId: c.task_id, try: c.try_number, lastSeen: c.last_seen, verdict },
        `task ${c.task_id} lost (no heartbeat): ${verdict}`,
      );
    } catch (err) {
      result.errors++;
      ctx.counters.error('reap-heartbeats', err, { tiId: c.id, runId: c.run_id });
    }
  }
  const reaped = result.retried + result.failed;
  if (reaped > 0) {
    ctx.counters.reaped('ti', reaped);
    ctx.counters.agentLost(reaped);
  }
  return result;
}
