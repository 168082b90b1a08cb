import type { V1Pod } from '@kubernetes/client-node';
import { expiredFinishedPods } from './finished-pods.js';
import type { PendingReasons } from './pending-reasons.js';
import type { PodAttemptEnds } from './pod-attempt-ends.js';
import type { PodAttempt, PodAttempts } from './pod-attempts.js';
import { isGenericPending } from './pod-condition.js';
import type { PodWatch } from './pod-watch.js';

/**
 * What the clock decides rather than a watch event, looked at every second or so: pending
 * timeouts, a long-pending pod's events listed, a deletion no kubelet confirms (read once its
 * grace period is long past), retries waiting for earlier tries' pods, and finished pods removed
 * past their retention.
 */

export interface SweepContext {
  live: PodAttempts;
  watches: ReadonlyMap<string, PodWatch>;
  /** When each finished pod was first seen finished (ms, wall clock), for retention. */
  finishedAt: Map<string, number>;
  ends: PodAttemptEnds;
  pending: PendingReasons;
  pods: { podPendingTimeoutMs: number; keepSucceededMs: number; keepFailedMs: number };
  /** The grace period a pod that may still start gets when deleted (seconds): never 0, a force delete. */
  graceSeconds: number;
  /** A pod pending this long with no reason in its status has its events listed, and again at most this often. */
  pendingEventsMs: number;
  /** A retry waiting for earlier tries' pods, looked at again. */
  parked(p: PodAttempt): void;
  /** A pod being deleted read again as it is now: its deletion may have become stuck. */
  reread(p: PodAttempt, pod: V1Pod): void;
}

export function sweepPods(c: SweepContext): void {
  const now = performance.now();
  const limit = c.pods.podPendingTimeoutMs;
  const longer = `(pending longer than ${Math.round(limit / 1000)}s)`;
  const eventsMs = c.pendingEventsMs;
  for (const p of c.live.values()) {
    if (p.over) continue;
    if (p.waitingFor) {
      c.parked(p);
      continue;
    }
    const pod = c.watches.get(p.namespace)?.get(p.name);
    if (pod?.metadata?.deletionTimestamp) c.reread(p, pod);
    if (p.over || p.running) continue;
    if (
      isGenericPending(p.statusReason) &&
      now - p.createdAt >= eventsMs &&
      (p.eventsAt === null || now - p.eventsAt >= eventsMs)
    ) {
      p.eventsAt = Number.POSITIVE_INFINITY;
      void c.pending.readEvents(p).finally(() => (p.eventsAt = performance.now()));
    }
    if (p.unschedulableSince !== null && now - p.unschedulableSince >= limit) {
      void c.ends.fail(
        p,
        `POD_UNSCHEDULABLE:${(p.pendingReason ?? '').replace(/^POD_PENDING:(Unschedulable:)?/, '')} ${longer}`,
        c.graceSeconds,
      );
    } else if (p.unschedulableSince === null && now - p.createdAt >= limit) {
      // Scheduled but never running (a volume that does not mount, a sandbox that does not
      // start): held live while pending, so this bound is the only one it has.
      const reason = (p.pendingReason ?? 'POD_PENDING').replace(/^POD_PENDING:?/, '') || 'no reason given';
      void c.ends.fail(p, `POD_PENDING_TIMEOUT:${reason} ${longer}`, c.graceSeconds);
    }
  }
  // Finished: nothing runs in them, so no grace is needed.
  for (const pod of expiredFinishedPods(c.watches.values(), c.finishedAt, c.pods, Date.now()))
    void c.ends.deletePod(pod.namespace, pod.name, 0);
}
