import type { V1Pod } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import type { Attempt } from '../executor.js';
import type { PendingReasons } from './pending-reasons.js';
import type { PodAttemptEnds } from './pod-attempt-ends.js';
import type { PodAttempt } from './pod-attempts.js';
import { podCondition, type PodCondition } from './pod-condition.js';
import type { PodGoneWaiters } from './pod-gone-waiters.js';
import { LABEL, labelValue } from '../../core/pod-identity.js';
import { podGraceSeconds } from './pod-manifest.js';
import type { PodWatch } from './pod-watch.js';

/**
 * A retry's guard against running beside an earlier try: that try's pod, if still there, is
 * deleted and seen gone before the new pod is created. The retry waits outside the dispatch
 * drainers (its dispatch has returned), held live and saying what it waits for, so a lost node's
 * many pods hold up no other task.
 */

export interface EarlierTriesContext {
  ends: PodAttemptEnds;
  gone: PodGoneWaiters;
  pending: PendingReasons;
  watches: ReadonlyMap<string, PodWatch>;
  log: Logger;
  killGraceMs: number;
  /** How long to wait for an earlier try's pod to be gone. Default: its grace period + 30 s. */
  previousGoneMs?: number | undefined;
}

/** The pods of earlier tries of the attempt's TI that may still run (not finished), by name. */
export function earlierTriesPods(watch: PodWatch, attempt: Attempt): string[] {
  const ti = labelValue(attempt.tiId);
  return [...watch.pods()]
    .filter((pod) => {
      const l = pod.metadata?.labels;
      const cond = podCondition(pod);
      return (
        l?.[LABEL.ti] === ti &&
        Number(l[LABEL.try]) < attempt.tryNumber &&
        cond.kind !== 'succeeded' &&
        cond.kind !== 'failed'
      );
    })
    .map((pod) => pod.metadata!.name!);
}

/**
 * Deletes the earlier tries' pods and waits until each is seen gone. True when all are; false
 * when the attempt is no longer wanted here (cancelled, the lead lost) or, after failing it with
 * the reason, when one is not gone in time: starting beside a pod that may run could run the
 * task twice. A pod whose node is read as lost meanwhile is force-deleted (`noteEarlierTries`).
 */
export async function waitForEarlierTries(
  c: EarlierTriesContext,
  p: PodAttempt,
  pods: string[],
  stillWanted: () => boolean,
): Promise<boolean> {
  const grace = podGraceSeconds(c.killGraceMs);
  const waitMs = c.previousGoneMs ?? grace * 1000 + 30_000;
  c.log.warn(
    { tiId: p.attempt.tiId, try: p.attempt.tryNumber, pods },
    'deleting the pods of earlier tries before the new try starts',
  );
  p.waitingFor = { pods, forced: new Set() };
  const seen = pods.map((name) => {
    const waiting = c.gone.whenGone(p.namespace, name, c.watches.get(p.namespace)?.get(name) !== undefined, waitMs);
    void c.ends.deletePod(p.namespace, name, grace);
    return waiting;
  });
  noteEarlierTries(c, p);
  const gone = await Promise.all(seen);
  if (!stillWanted()) return false;
  p.waitingFor = null;
  if (gone.every(Boolean)) return true;
  const error = `POD_PREVIOUS_TRY_NOT_GONE: the pod of an earlier try (${pods.filter((_, i) => !gone[i]).join(', ')}) was not gone within ${Math.round(waitMs / 1000)}s; not starting beside it`;
  await c.ends.fail(p, error);
  return false;
}

/**
 * A waiting retry looked at again (when it parks, on each sweep, on a change of a pod it waits
 * for): an earlier pod read as lost (its node NotReady, evicted, its deletion unconfirmed past
 * the grace period) is force-deleted, as a live attempt's lost pod is; the pending reason names
 * the first pod still there and its node.
 */
export function noteEarlierTries(c: EarlierTriesContext, p: PodAttempt): void {
  const w = p.waitingFor;
  const watch = c.watches.get(p.namespace);
  if (!w || !watch || p.over) return;
  const left = w.pods.map((name) => watch.get(name)).filter((pod): pod is V1Pod => pod !== undefined);
  for (const pod of left) {
    const name = pod.metadata!.name!;
    const cond = podCondition(pod);
    if (cond.kind !== 'lost' || w.forced.has(name)) continue;
    w.forced.add(name);
    c.log.warn(
      { tiId: p.attempt.tiId, try: p.attempt.tryNumber, pod: name, reason: cond.reason },
      "an earlier try's pod is lost with its node: force-deleting it so the retry can start",
    );
    void c.ends.deletePod(p.namespace, name, 0);
  }
  const first = left[0];
  if (!first) return;
  p.statusReason = `EARLIER_TRY_POD:${waitingText(first, podCondition(first))}${left.length > 1 ? ` (and ${left.length - 1} more)` : ''}`;
  c.pending.note(p);
}

function waitingText(pod: V1Pod, cond: PodCondition): string {
  const name = pod.metadata!.name!;
  const node = pod.spec?.nodeName;
  if (!node) return `waiting for pod ${name} to be gone`;
  if (cond.kind === 'lost' && cond.reason.startsWith('NodeNotReady'))
    return `waiting for pod ${name} on NotReady node ${node}`;
  return `waiting for pod ${name} on node ${node} to be gone (deleted, not yet confirmed by its kubelet)`;
}
