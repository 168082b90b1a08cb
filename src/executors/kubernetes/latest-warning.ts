/**
 * The pending reason a pod's events give when its status gives none: its latest Warning event
 * (FailedMount, FailedCreatePodSandBox, FailedScheduling...), as `POD_PENDING:<reason>:<message>`.
 */
import type { CoreV1Api, CoreV1Event } from '@kubernetes/client-node';
import { withMessage } from './pod-condition.js';

const when = (e: CoreV1Event): number => {
  const t = e.lastTimestamp ?? e.eventTime ?? e.firstTimestamp ?? e.metadata?.creationTimestamp;
  return t ? new Date(t).getTime() : 0;
};

/**
 * Null when the pod (of this uid, if given) has no Warning event. Ties (second-precision times) go to the
 * later listed.
 */
export function latestWarning(events: readonly CoreV1Event[], podUid?: string): string | null {
  let best: CoreV1Event | null = null;
  for (const e of events) {
    if (e.type !== 'Warning' || !e.reason) continue;
    if (podUid && e.involvedObject?.uid && e.involvedObject.uid !== podUid) continue;
    if (best === null || when(e) >= when(best)) best = e;
  }
  return best ? `POD_PENDING:${withMessage(best.reason!, best.message)}` : null;
}

/** The latest Warning event of one pod, listed from the API server; null when it has none. */
export async function readLatestWarning(
  api: CoreV1Api,
  namespace: string,
  name: string,
  podUid?: string,
): Promise<string | null> {
  const list = await api.listNamespacedEvent({ namespace, fieldSelector: `involvedObject.name=${name}` });
  return latestWarning(list.items, podUid);
}
