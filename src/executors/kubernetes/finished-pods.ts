import type { V1Pod } from '@kubernetes/client-node';
import { podCondition } from './pod-condition.js';
import type { PodWatch } from './pod-watch.js';

/**
 * Finished pods (succeeded or failed) whose retention has passed, to delete: a succeeded pod after
 * `keepSucceededMs`, a failed one (kept longer, for `kubectl logs`) after `keepFailedMs`, counted
 * from when its containers ended (or when it was first seen finished). `seen` keeps those times
 * across calls; a pod returned is marked so that it is not returned again while its delete is on
 * its way.
 */
export function expiredFinishedPods(
  watches: Iterable<PodWatch>,
  seen: Map<string, number>,
  keep: { keepSucceededMs: number; keepFailedMs: number },
  wall: number,
): { namespace: string; name: string }[] {
  const expired: { namespace: string; name: string }[] = [];
  for (const w of watches) {
    for (const pod of w.pods()) {
      const cond = podCondition(pod);
      if (cond.kind !== 'succeeded' && cond.kind !== 'failed') continue;
      if (pod.metadata?.deletionTimestamp) continue;
      const name = pod.metadata!.name!;
      const key = `${w.namespace}/${name}`;
      const since = seen.get(key) ?? finishedTime(pod) ?? wall;
      seen.set(key, since);
      if (wall - since >= (cond.kind === 'succeeded' ? keep.keepSucceededMs : keep.keepFailedMs)) {
        seen.set(key, Number.POSITIVE_INFINITY);
        expired.push({ namespace: w.namespace, name });
      }
    }
  }
  return expired;
}

/** When the pod's containers ended (ms), if it says. */
function finishedTime(pod: V1Pod): number | null {
  const times = (pod.status?.containerStatuses ?? [])
    .map((c) => c.state?.terminated?.finishedAt)
    .filter((t): t is Date => t !== undefined && t !== null);
  if (times.length === 0) return null;
  return Math.max(...times.map((t) => new Date(t).getTime()));
}
