import { randomUUID } from 'node:crypto';
import { now } from './timestamp.js';
import type { KubeObject } from './object-store.js';

/**
 * The defaults the API server fills in on create (SetDefaults_Pod, SetDefaults_Container, the
 * ServiceAccount admission and the DefaultTolerationSeconds plugin), so a pod read back looks like
 * one read from a cluster, with the QoS class in its status.
 */
export function defaultPod(input: any, namespace: string): KubeObject {
  const pod = structuredClone(input);
  delete pod.status;
  pod.metadata = { ...pod.metadata, namespace, uid: randomUUID(), creationTimestamp: now() };
  delete pod.metadata.deletionTimestamp;
  delete pod.metadata.deletionGracePeriodSeconds;
  const spec = pod.spec;
  spec.restartPolicy ??= 'Always';
  spec.terminationGracePeriodSeconds ??= 30;
  spec.dnsPolicy ??= 'ClusterFirst';
  spec.schedulerName ??= 'default-scheduler';
  spec.securityContext ??= {};
  spec.serviceAccountName ??= spec.serviceAccount ?? 'default';
  spec.serviceAccount = spec.serviceAccountName;
  spec.enableServiceLinks ??= true;
  spec.preemptionPolicy ??= 'PreemptLowerPriority';
  spec.priority ??= 0;
  const tolerations: any[] = spec.tolerations ?? [];
  for (const key of ['node.kubernetes.io/not-ready', 'node.kubernetes.io/unreachable']) {
    if (!tolerations.some((t) => t.key === key))
      tolerations.push({ key, operator: 'Exists', effect: 'NoExecute', tolerationSeconds: 300 });
  }
  spec.tolerations = tolerations;
  for (const c of spec.containers) {
    c.terminationMessagePath ??= '/dev/termination-log';
    c.terminationMessagePolicy ??= 'File';
    c.imagePullPolicy ??= pullPolicyFor(c.image);
    c.resources ??= {};
    // Limits without requests: the requests default to the limits.
    if (c.resources.limits) c.resources.requests = { ...c.resources.limits, ...c.resources.requests };
  }
  pod.status = { phase: 'Pending', qosClass: qosClass(spec.containers) };
  return pod;
}

function pullPolicyFor(image: string): string {
  const last = image.split('/').pop() ?? image;
  if (image.includes('@')) return 'IfNotPresent';
  return !last.includes(':') || last.endsWith(':latest') ? 'Always' : 'IfNotPresent';
}

function qosClass(containers: any[]): 'Guaranteed' | 'Burstable' | 'BestEffort' {
  let any = false;
  let guaranteed = true;
  for (const c of containers) {
    const req = c.resources?.requests ?? {};
    const lim = c.resources?.limits ?? {};
    if (Object.keys(req).length > 0 || Object.keys(lim).length > 0) any = true;
    for (const r of ['cpu', 'memory']) {
      if (lim[r] === undefined || String(req[r] ?? lim[r]) !== String(lim[r])) guaranteed = false;
    }
  }
  if (!any) return 'BestEffort';
  return guaranteed ? 'Guaranteed' : 'Burstable';
}
