import type { Logger } from 'pino';
import type { Attempt } from '../executor.js';
import type { PodAttemptEnds } from './pod-attempt-ends.js';
import type { PodAttempts } from './pod-attempts.js';
import { podCondition } from './pod-condition.js';
import type { PodGoneWaiters } from './pod-gone-waiters.js';
import { LABEL, labelValue } from '../../core/pod-identity.js';
import { podGraceSeconds } from './pod-manifest.js';
import type { PodWatch } from './pod-watch.js';

/**
 * A retry's guard against running beside an earlier try: that try's pod, if still there, is
 * deleted and seen gone before the new pod is created.
 */

export interface EarlierTriesContext {
  live: PodAttempts;
  ends: PodAttemptEnds;
  gone: PodGoneWaiters;
  watches: ReadonlyMap<string, PodWatch>;
  log: Logger;
  killGraceMs: number;
  /** How long to wait for an earlier try's pod to be gone. Default: its grace period + 30 s. */
  previousGoneMs?: number | undefined;
}

/**
 * Before a try's pod is created, the pods of earlier tries of its TI that may still run are
 * deleted and seen gone, so two tries never run at once. False (the attempt failed, saying
 * why) when one is not gone in time: a pod on a node that stopped answering cannot be proven
 * gone, and starting beside it could run the task twice.
 */
export async function earlierTriesGone(c: EarlierTriesContext, watch: PodWatch, attempt: Attempt): Promise<boolean> {
  const ti = labelValue(attempt.tiId);
  const earlier = [...watch.pods()].filter((pod) => {
    const l = pod.metadata?.labels;
    const cond = podCondition(pod);
    return (
      l?.[LABEL.ti] === ti &&
      Number(l[LABEL.try]) < attempt.tryNumber &&
      cond.kind !== 'succeeded' &&
      cond.kind !== 'failed'
    );
  });
  if (earlier.length === 0) return true;
  const grace = podGraceSeconds(c.killGraceMs);
  const waitMs = c.previousGoneMs ?? grace * 1000 + 30_000;
  const names = earlier.map((pod) => pod.metadata!.name!);
  c.log.warn(
    { tiId: attempt.tiId, try: attempt.tryNumber, pods: names },
    'deleting the pods of earlier tries before the new try starts',
  );
  const gone = await Promise.all(
    names.map((name) => {
      const seen = c.gone.whenGone(
        watch.namespace,
        name,
        c.watches.get(watch.namespace)?.get(name) !== undefined,
        waitMs,
      );
      void c.ends.deletePod(watch.namespace, name, grace);
      return seen;
    }),
  );
  if (gone.every(Boolean)) return true;
  const error = `POD_PREVIOUS_TRY_NOT_GONE: the pod of an earlier try (${names.filter((_, i) => !gone[i]).join(', ')}) was not gone within ${Math.round(waitMs / 1000)}s; not starting beside it`;
  const p = c.live.track(attempt, watch.namespace, performance.now());
  await c.ends.fail(p, error);
  return false;
}
