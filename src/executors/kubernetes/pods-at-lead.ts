import type { V1Pod } from '@kubernetes/client-node';
import type { Attempt } from '../executor.js';
import { podCondition } from './pod-condition.js';
import { attemptOfPod, podName } from '../../core/pod-identity.js';
import type { PodWatch } from './pod-watch.js';

/** A pod of ours that is not finished and whose attempt is not live, found at a change of leader. */
export interface StrayPod {
  namespace: string;
  name: string;
  /** `<ti>/<try>` of the attempt its labels name. */
  key: string;
}

export const podAttemptKey = (a: { tiId: string; tryNumber: number }) => `${a.tiId}/${a.tryNumber}`;

/**
 * What a new leader finds in the namespaces it watches, against the attempts the store says are
 * live: the pods of live attempts (to follow), and the unfinished pods of attempts that are over
 * (strays, which must not run on beside a retry). A pod is a live attempt's only under that
 * attempt's own name: the name hashes its token, so a pod left by an earlier database, or of
 * an attempt since retried, never passes for the current one.
 */
export function podsAtLead(
  active: readonly Attempt[],
  watches: Iterable<PodWatch>,
  followed: (namespace: string, name: string) => boolean,
): { adopt: { attempt: Attempt; namespace: string; pod: V1Pod }[]; strays: StrayPod[] } {
  const byKey = new Map(active.map((a) => [podAttemptKey(a), a]));
  const adopt: { attempt: Attempt; namespace: string; pod: V1Pod }[] = [];
  const strays: StrayPod[] = [];
  for (const w of watches) {
    for (const pod of w.pods()) {
      const key = attemptOfPod(pod.metadata?.labels);
      if (!key) continue;
      const name = pod.metadata!.name!;
      const attempt = byKey.get(podAttemptKey(key));
      if (attempt && podName(attempt) === name) {
        adopt.push({ attempt, namespace: w.namespace, pod });
        continue;
      }
      const cond = podCondition(pod);
      if (cond.kind !== 'succeeded' && cond.kind !== 'failed' && !followed(w.namespace, name))
        strays.push({ namespace: w.namespace, name, key: podAttemptKey(key) });
    }
  }
  return { adopt, strays };
}
