import type { V1Pod } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import type { KubernetesMetrics, KubernetesStore } from './kubernetes-executor-options.js';
import type { PendingReasons } from './pending-reasons.js';
import type { PodAttemptEnds } from './pod-attempt-ends.js';
import type { PodAttempt, PodAttempts } from './pod-attempts.js';
import { podCondition } from './pod-condition.js';

/**
 * What a pod's change (a watch event, or the pod as found at a create or a new lead) means for
 * its attempt: pending with its reason, never going to start, running, or over one way or another.
 */

export interface PodChangeContext {
  live: PodAttempts;
  ends: PodAttemptEnds;
  pending: PendingReasons;
  store: KubernetesStore;
  metrics?: KubernetesMetrics | undefined;
  log: Logger;
  /** The grace period a deleted pod gets (seconds). */
  graceSeconds: number;
}

export function applyPodChange(
  c: PodChangeContext,
  p: PodAttempt,
  type: 'ADDED' | 'MODIFIED' | 'DELETED',
  pod: V1Pod,
): void {
  if (p.over) {
    if (type === 'DELETED') c.live.untrack(p);
    return;
  }
  if (type === 'DELETED') {
    c.live.untrack(p);
    void c.ends.lose(p, `POD_DELETED: pod ${p.name} in namespace ${p.namespace} was deleted before its attempt ended`);
    return;
  }
  const cond = podCondition(pod);
  // The task container ended but a sidecar keeps the pod running: the pod goes with its attempt.
  if ((cond.kind === 'succeeded' || cond.kind === 'failed') && pod.status?.phase === 'Running')
    void c.ends.deletePod(p.namespace, p.name, c.graceSeconds);
  switch (cond.kind) {
    case 'pending':
      if (cond.unschedulable) p.unschedulableSince ??= performance.now();
      else p.unschedulableSince = null;
      p.statusReason = cond.reason;
      c.pending.note(p);
      return;
    case 'cannot-start':
      // It will never start; deleted (its retry waits until it is gone, so it cannot start beside it).
      void c.ends.fail(p, `POD_CANNOT_START:${cond.reason}`, c.graceSeconds);
      return;
    case 'running':
      if (!p.running) {
        p.running = true;
        p.runningAt = performance.now();
        c.metrics?.podStarted((performance.now() - p.createdAt) / 1000);
        if (p.pendingReason !== null) {
          p.pendingReason = null;
          void c.store
            .pending(p.attempt, null)
            .catch((err: unknown) => c.log.warn({ err, tiId: p.attempt.tiId }, 'could not clear a pending reason'));
        }
      }
      return;
    case 'succeeded':
      // The agent exits 0 once its attempt's end is recorded: nothing to say, unless it never
      // got its attempt (it was over before the pod started), which the guarded write ignores.
      p.over = true;
      c.live.untrack(p);
      void c.store
        .lost(
          p.attempt,
          `POD_SUCCEEDED_WITHOUT_REPORT: pod ${p.name} ended without the attempt's end being recorded`,
          false,
        )
        .catch(() => {});
      return;
    case 'failed':
      p.over = true;
      c.live.untrack(p);
      void c.ends.lose(p, `POD_FAILED:${cond.reason}`, { withLogTail: true });
      return;
    case 'lost':
      // Its node stopped answering: the pod may run on there, which no one can prove otherwise.
      // The attempt ends now (its token dies with it, so nothing the old pod reports is applied),
      // spending no try (the task did nothing wrong, within --max-free-retries). The pod is
      // deleted gracefully, never forced: a force delete would let the retry start while it may
      // still run. The retry waits for it (earlier-tries-gone.ts); the node kills it if it comes back.
      p.over = true;
      void c.ends.lose(p, `POD_LOST:${cond.reason}`, { free: true });
      void c.ends.deletePod(p.namespace, p.name, c.graceSeconds);
      return;
  }
}
