import type { Cluster } from './cluster.js';
import { deletePod } from './delete-pod.js';
import { isTerminal } from './fake-scheduler.js';
import type { KubeObject } from './object-store.js';
import { now } from './timestamp.js';

/**
 * The node running this pod is lost: its processes die with it (unless `kill: false`, a
 * partition: they go on running unseen), every pod on it turns phase Unknown with Ready=False
 * (NodeLost), no pod is scheduled there any more, and a graceful delete of its pods stays
 * Terminating (no kubelet confirms it) until a force delete.
 */
export function loseNode(c: Cluster, namespace: string, name: string, opts: { kill?: boolean } = {}): void {
  const pod = c.store.get('pods', namespace, name);
  const nodeName = pod?.spec?.nodeName;
  if (!nodeName) throw new Error(`fake kube api: pod ${namespace}/${name} is not on a node`);
  const node = c.scheduler?.nodes.find((n) => n.name === nodeName);
  if (node) node.lost = true;
  const lost = c.kubelet.loseNode(nodeName, opts.kill ?? true);
  const onNode = lost.length > 0 ? lost : [pod];
  for (const p of onNode) {
    if (!isTerminal(p)) recordNodeNotReady(c, p);
    c.store.update('pods', p.metadata.namespace!, p.metadata.name, (q) => {
      if (isTerminal(q)) return;
      q.status.phase = 'Unknown';
      q.status.reason = 'NodeLost';
      q.status.message = `Node ${nodeName} which was running pod ${q.metadata.name} is unresponsive`;
      q.status.conditions = (q.status.conditions ?? []).map((c: any) =>
        c.type === 'Ready' ? { ...c, status: 'False', reason: 'NodeLost', lastTransitionTime: now() } : c,
      );
    });
  }
}

/**
 * The node running this pod is lost, as Kubernetes 1.27+ reports it: no phase `Unknown` any
 * more. Its kubelet stops at once (a graceful delete of its pods is never confirmed); after the
 * node controller's --node-monitor-grace-period (`notReadyAfterMs`, 40 s by default as in
 * kube-controller-manager) it marks the node's pods Ready=False (their containers' statuses,
 * which only a kubelet writes, stay as they were) and taints the node
 * `node.kubernetes.io/unreachable` (NoSchedule, NoExecute); after the pods' toleration of it
 * (`evictAfterMs`, 300 s by the DefaultTolerationSeconds admission) the taint manager adds the
 * DisruptionTarget condition (DeletionByTaintManager) and deletes them gracefully, and with no
 * kubelet to confirm, they stay Terminating in phase Running until a force delete.
 */
export function loseNodeAsCurrent(
  c: Cluster,
  namespace: string,
  name: string,
  opts: { kill?: boolean; notReadyAfterMs?: number; evictAfterMs?: number } = {},
): void {
  const pod = c.store.get('pods', namespace, name);
  const nodeName = pod?.spec?.nodeName;
  if (!nodeName) throw new Error(`fake kube api: pod ${namespace}/${name} is not on a node`);
  c.lostNodes.add(nodeName);
  const node = c.scheduler?.nodes.find((n) => n.name === nodeName);
  if (node) node.lost = true;
  c.kubelet.loseNode(nodeName, opts.kill ?? true);
  const marked = setTimeout(() => {
    c.timers.delete(marked);
    markNodeNotReady(c, nodeName, opts.evictAfterMs ?? 300_000);
  }, opts.notReadyAfterMs ?? 40_000);
  c.timers.add(marked);
}

/**
 * The Node object is deleted (an operator who knows the machine is dead, or the cloud node
 * lifecycle controller once the cloud says the instance is gone): the pod garbage collector
 * force-deletes every pod bound to a node that no longer exists ("orphaned" pods), DELETED at once.
 */
export function deleteNode(c: Cluster, nodeName: string): void {
  c.lostNodes.delete(nodeName);
  const nodes = c.scheduler?.nodes;
  const i = nodes?.findIndex((n) => n.name === nodeName) ?? -1;
  if (nodes && i >= 0) nodes.splice(i, 1);
  for (const p of c.store.list('pods', undefined, (q) => q.spec?.nodeName === nodeName))
    deletePod(c, p.metadata.namespace!, p.metadata.name, 0);
}

/** The node controller's part of a lost node (loseNodeAsCurrent): Ready=False, the taints, then the taint manager. */
function markNodeNotReady(c: Cluster, nodeName: string, evictAfterMs: number): void {
  const node = c.scheduler?.nodes.find((n) => n.name === nodeName);
  if (node) {
    const timeAdded = now();
    node.taints.push(
      { key: 'node.kubernetes.io/unreachable', effect: 'NoSchedule', timeAdded } as never,
      { key: 'node.kubernetes.io/unreachable', effect: 'NoExecute', timeAdded } as never,
    );
  }
  // Every pod bound to the node, whoever started it (the kubelet, or a test driving it by hand).
  const onNode = c.store.list('pods', undefined, (p) => p.spec?.nodeName === nodeName && !isTerminal(p));
  for (const p of onNode) {
    recordNodeNotReady(c, p);
    c.store.update('pods', p.metadata.namespace!, p.metadata.name, (q) => {
      q.status.conditions = (q.status.conditions ?? []).map((c: any) =>
        c.type === 'Ready' && c.status !== 'False' ? { ...c, status: 'False', lastTransitionTime: now() } : c,
      );
    });
  }
  const t = setTimeout(() => {
    c.timers.delete(t);
    for (const p of onNode) {
      const ns = p.metadata.namespace!;
      if (!c.store.get('pods', ns, p.metadata.name)) continue;
      c.store.update('pods', ns, p.metadata.name, (q) => {
        q.status.conditions = [
          ...(q.status.conditions ?? []),
          {
            type: 'DisruptionTarget',
            status: 'True',
            reason: 'DeletionByTaintManager',
            message: 'Taint manager: deleting due to NoExecute taint',
            lastTransitionTime: now(),
          },
        ];
      });
      c.recorder.record(p, {
        type: 'Normal',
        reason: 'TaintManagerEviction',
        message: `Marking for deletion Pod ${ns}/${p.metadata.name}`,
        component: 'taint-controller',
      });
      deletePod(c, ns, p.metadata.name, undefined);
    }
  }, evictAfterMs);
  c.timers.add(t);
}

/** The node controller's event on a pod of a node that stopped reporting. */
function recordNodeNotReady(c: Cluster, pod: KubeObject): void {
  c.recorder.record(pod, {
    type: 'Warning',
    reason: 'NodeNotReady',
    message: 'Node is not ready',
    component: 'node-controller',
  });
}
