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
 * deleted (gracefully) and seen gone before the new pod is created. The retry waits outside the
 * dispatch drainers (its dispatch has returned), held live and saying what it waits for, so a lost
 * node's many pods hold up no other task. It waits as long as it takes: a pod on a node that does
 * not answer may still run, and only its kubelet's confirmation, the Node object's deletion (the
 * pod garbage collector then removes it) or an operator's `kubectl delete pod --force` proves it
 * gone. It is never force-deleted from here (Kubernetes' at-most-once guidance for StatefulSets).
 */

export interface EarlierTriesContext {
  ends: PodAttemptEnds;
  gone: PodGoneWaiters;
  pending: PendingReasons;
  watches: ReadonlyMap<string, PodWatch>;
  log: Logger;
  killGraceMs: number;
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
 * Deletes the earlier tries' pods with their grace period and waits until each is seen gone. True
 * when all are; false when the attempt is no longer wanted here (cancelled, the lead lost).
 */
export async function waitForEarlierTries(
  c: EarlierTriesContext,
  p: PodAttempt,
  pods: string[],
  stillWanted: () => boolean,
): Promise<boolean> {
  const grace = podGraceSeconds(c.killGraceMs);
  c.log.warn(
    { tiId: p.attempt.tiId, try: p.attempt.tryNumber, pods },
    'deleting the pods of earlier tries before the new try starts',
  );
  p.waitingFor = { pods };
  const seen = pods.map((name) => {
    const waiting = c.gone.whenGone(p.namespace, name, c.watches.get(p.namespace)?.get(name) !== undefined);
    void c.ends.deletePod(p.namespace, name, grace);
    return waiting;
  });
  noteEarlierTries(c, p);
  const gone = await Promise.all(seen);
  if (!stillWanted()) return false;
  p.waitingFor = null;
  return gone.every(Boolean);
}

/**
 * A waiting retry looked at again (when it parks, on each sweep, on a change of a pod it waits
 * for): the pending reason names the first pod still there and its node, and, when that node does
 * not answer, what releases the retry.
 */
export function noteEarlierTries(c: EarlierTriesContext, p: PodAttempt): void {
  const w = p.waitingFor;
  const watch = c.watches.get(p.namespace);
  if (!w || !watch || p.over) return;
  const left = w.pods.map((name) => watch.get(name)).filter((pod): pod is V1Pod => pod !== undefined);
  const first = left[0];
  if (!first) return;
  const more = left.length > 1 ? ` (and ${left.length - 1} more)` : '';
  p.statusReason = `EARLIER_TRY_POD:${waitingText(first, podCondition(first))}${more}`;
  c.pending.note(p);
}

/** What releases a retry waiting for a pod whose node does not answer. */
const RELEASE = 'if the node is dead: kubectl delete pod --force, or delete the Node';

function waitingText(pod: V1Pod, cond: PodCondition): string {
  const name = pod.metadata!.name!;
  const node = pod.spec?.nodeName;
  if (!node) return `waiting for pod ${name} to be gone`;
  if (cond.kind === 'lost' && cond.reason.startsWith('NodeNotReady'))
    return `waiting for pod ${name} on NotReady node ${node} (${RELEASE})`;
  if (cond.kind === 'lost')
    return `waiting for pod ${name} on node ${node} to be gone (deleted, not confirmed by its kubelet; ${RELEASE})`;
  return `waiting for pod ${name} on node ${node} to be gone (deleted, not yet confirmed by its kubelet)`;
}
