import type { Cluster } from './cluster.js';
import { isTerminal } from './fake-scheduler.js';
import { listObjects, stripKind } from './list-objects.js';
import type { KubeObject } from './object-store.js';
import { badRequest, notFound, statusFor } from './status.js';

/** DELETE on the collection: every pod the selectors match is deleted as one DELETE would; the answer lists them. */
export function deletePods(c: Cluster, namespace: string, body: string, url: URL): unknown {
  const list = listObjects(c.store, 'pods', namespace, url) as {
    metadata: Record<string, unknown>;
    items: KubeObject[];
  };
  const items = list.items.map((p) => stripKind(deletePodRequest(c, namespace, p.metadata.name, body, url)));
  return {
    kind: 'PodList',
    apiVersion: 'v1',
    metadata: { resourceVersion: String(c.store.resourceVersion) },
    items,
  };
}

export function deletePodRequest(c: Cluster, namespace: string, name: string, body: string, url: URL): KubeObject {
  let options: any = {};
  if (body.trim() !== '') {
    try {
      options = JSON.parse(body) ?? {};
    } catch (err) {
      throw badRequest(`couldn't get version/kind; json parse error: ${(err as Error).message}`);
    }
  }
  const pod = c.store.get('pods', namespace, name);
  if (!pod) throw notFound('pods', name);
  const pre = options.preconditions ?? {};
  if (pre.uid && pre.uid !== pod.metadata.uid) throw preconditionFailed(name, 'UID', pre.uid, pod.metadata.uid);
  if (pre.resourceVersion && pre.resourceVersion !== pod.metadata.resourceVersion)
    throw preconditionFailed(name, 'ResourceVersion', pre.resourceVersion, pod.metadata.resourceVersion);
  const q = url.searchParams.get('gracePeriodSeconds');
  const grace = options.gracePeriodSeconds ?? (q !== null ? Number(q) : undefined);
  if (grace !== undefined && (!Number.isInteger(grace) || grace < 0))
    throw badRequest(`invalid gracePeriodSeconds: ${grace}`);
  return deletePod(c, namespace, name, grace);
}

/**
 * The pod strategy's graceful delete: an unscheduled or finished pod, or grace 0, goes at once;
 * otherwise deletionTimestamp and deletionGracePeriodSeconds are set (MODIFIED) and the kubelet
 * stops the pod and removes it. A later delete may only shorten the grace.
 */
export function deletePod(c: Cluster, namespace: string, name: string, requestedGrace: number | undefined): KubeObject {
  const pod = c.store.get('pods', namespace, name)!;
  let grace = requestedGrace ?? pod.spec.terminationGracePeriodSeconds ?? 30;
  if (!pod.spec.nodeName || isTerminal(pod)) grace = 0;
  if (grace === 0) {
    const gone = c.store.remove('pods', namespace, name)!;
    c.kubelet.forget(namespace, name);
    c.scheduler?.retryPending();
    return gone;
  }
  const current = pod.metadata.deletionGracePeriodSeconds as number | undefined;
  const deadline = pod.metadata.deletionTimestamp ? Date.parse(pod.metadata.deletionTimestamp) : Infinity;
  if (current !== undefined && Date.now() + grace * 1000 >= deadline) return pod;
  const updated = c.store.update('pods', namespace, name, (p) => {
    p.metadata.deletionTimestamp = new Date(Date.now() + grace * 1000).toISOString().replace(/\.\d+Z$/, 'Z');
    p.metadata.deletionGracePeriodSeconds = grace;
  })!;
  if (c.lostNodes.has(pod.spec.nodeName)) {
    // No kubelet confirms it: Terminating until a force delete.
  } else if (c.manual) {
    const t = setTimeout(() => {
      c.timers.delete(t);
      c.store.remove('pods', namespace, name);
    }, grace * 1000);
    c.timers.add(t);
  } else {
    c.kubelet.terminate(namespace, name, grace);
  }
  return updated;
}

/** The 409 of a delete whose precondition (`what`: UID or ResourceVersion) the pod does not meet. */
function preconditionFailed(name: string, what: string, given: unknown, have: unknown) {
  const detail = `${what} in precondition: ${given}, ${what} in object meta: ${have}`;
  return statusFor(
    409,
    `Operation cannot be fulfilled on pods "${name}": Precondition failed: ${detail}`,
    { name, kind: 'pods' },
    'Conflict',
  );
}
