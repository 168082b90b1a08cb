import type { EventRecorder } from './event-recorder.js';
import type { KubeObject, ObjectStore } from './object-store.js';
import { parseQuantity } from './quantity.js';
import { now } from './timestamp.js';

/**
 * The default scheduler, reduced to what decides whether a pod can start: each fake node's
 * allocatable cpu, memory and pod count against the requests of the pods bound to it, and the
 * pod's nodeSelector against the node's labels. A pod that fits nowhere stays Pending with
 * PodScheduled=False/Unschedulable and a FailedScheduling event worded as the scheduler words it,
 * and is tried again when a pod ends or goes away (as the scheduler requeues on cluster events).
 */
export interface Taint {
  key: string;
  value?: string;
  effect: 'NoSchedule' | 'PreferNoSchedule' | 'NoExecute';
}

export interface FakeNode {
  name: string;
  taints: Taint[];
  cpu: string;
  memory: string;
  pods: number;
  labels: Record<string, string>;
  lost: boolean;
}

export interface NodesOption {
  count: number;
  cpu: string;
  memory: string;
  /** Labels every node gets, besides kubernetes.io/hostname and kubernetes.io/os. */
  labels?: Record<string, string>;
  /** Taints every node has: a pod must tolerate the NoSchedule and NoExecute ones to land there. */
  taints?: Taint[];
}

export function makeNodes(opt: NodesOption): FakeNode[] {
  return Array.from({ length: opt.count }, (_, i) => {
    const name = `node-${i + 1}`;
    return {
      name,
      taints: opt.taints ?? [],
      cpu: opt.cpu,
      memory: opt.memory,
      pods: 110,
      labels: { 'kubernetes.io/hostname': name, 'kubernetes.io/os': 'linux', ...opt.labels },
      lost: false,
    };
  });
}

/** A pod's requests (cpu in cores, memory in bytes), summed over its containers. */
export function podRequests(pod: KubeObject): { cpu: number; memory: number } {
  let cpu = 0;
  let memory = 0;
  for (const c of pod.spec?.containers ?? []) {
    cpu += parseQuantity(c.resources?.requests?.cpu) ?? 0;
    memory += parseQuantity(c.resources?.requests?.memory) ?? 0;
  }
  return { cpu, memory };
}

/** The first NoSchedule/NoExecute taint no toleration of the pod matches (the TaintToleration filter). */
function untolerated(pod: KubeObject, taints: Taint[]): Taint | undefined {
  const tolerations: any[] = pod.spec?.tolerations ?? [];
  return taints.find(
    (t) =>
      t.effect !== 'PreferNoSchedule' &&
      !tolerations.some((tol) => {
        if (tol.effect && tol.effect !== t.effect) return false;
        if ((tol.operator ?? 'Equal') === 'Exists') return !tol.key || tol.key === t.key;
        return tol.key === t.key && (tol.value ?? '') === (t.value ?? '');
      }),
  );
}

export function isTerminal(pod: KubeObject): boolean {
  return pod.status?.phase === 'Succeeded' || pod.status?.phase === 'Failed';
}

export class FakeScheduler {
  private readonly unschedulable = new Set<string>();
  private readonly timers = new Set<NodeJS.Timeout>();
  private retryTimer: NodeJS.Timeout | undefined;
  private closed = false;

  constructor(
    private readonly store: ObjectStore,
    private readonly recorder: EventRecorder,
    readonly nodes: FakeNode[],
    private readonly delayMs: number,
    private readonly onBound: (namespace: string, name: string) => void,
  ) {}

  enqueue(namespace: string, name: string): void {
    this.later(this.delayMs, () => this.attempt(namespace, name));
  }

  /** Called when resources are freed: every unschedulable pod gets another try. */
  retryPending(): void {
    for (const key of [...this.unschedulable]) {
      const [ns, name] = key.split('/') as [string, string];
      this.attempt(ns, name);
    }
  }

  close(): void {
    this.closed = true;
    for (const t of this.timers) clearTimeout(t);
    if (this.retryTimer) clearInterval(this.retryTimer);
  }

  private later(ms: number, fn: () => void): void {
    if (this.closed) return;
    const t = setTimeout(() => {
      this.timers.delete(t);
      if (!this.closed) fn();
    }, ms);
    this.timers.add(t);
  }

  private attempt(namespace: string, name: string): void {
    const key = `${namespace}/${name}`;
    const pod = this.store.get('pods', namespace, name);
    if (!pod || pod.spec?.nodeName || pod.metadata.deletionTimestamp) {
      this.unschedulable.delete(key);
      return;
    }
    const want = podRequests(pod);
    const all = this.store.scan('pods', undefined, (p) => Boolean(p.spec?.nodeName) && !isTerminal(p));
    const reasons = new Map<string, number>();
    const count = (r: string) => reasons.set(r, (reasons.get(r) ?? 0) + 1);
    let chosen: FakeNode | undefined;
    // Preemption helps only where resources were short; a selector or a taint it cannot change.
    let unresolvable = true;
    for (const node of this.nodes) {
      if (node.lost) {
        count('node(s) had untolerated taint {node.kubernetes.io/unreachable: }');
        continue;
      }
      const selector = (pod.spec?.nodeSelector ?? {}) as Record<string, string>;
      if (!Object.entries(selector).every(([k, v]) => node.labels[k] === v)) {
        count("node(s) didn't match Pod's node affinity/selector");
        continue;
      }
      const taint = untolerated(pod, node.taints);
      if (taint) {
        count(`node(s) had untolerated taint {${taint.key}: ${taint.value ?? ''}}`);
        continue;
      }
      unresolvable = false;
      const onNode = all.filter((p) => p.spec.nodeName === node.name);
      const used = onNode.reduce(
        (acc, p) => {
          const r = podRequests(p);
          return { cpu: acc.cpu + r.cpu, memory: acc.memory + r.memory };
        },
        { cpu: 0, memory: 0 },
      );
      const misses: string[] = [];
      if (onNode.length + 1 > node.pods) misses.push('Too many pods');
      if (used.cpu + want.cpu > (parseQuantity(node.cpu) ?? 0) + 1e-9) misses.push('Insufficient cpu');
      if (used.memory + want.memory > (parseQuantity(node.memory) ?? 0)) misses.push('Insufficient memory');
      if (misses.length === 0) {
        chosen ??= node;
        if (chosen === node) break;
      }
      for (const m of misses) count(m);
    }
    if (chosen) {
      this.unschedulable.delete(key);
      this.bind(pod, chosen);
      return;
    }
    const n = this.nodes.length;
    const histogram = [...reasons]
      .map(([r, c]) => `${c} ${r}`)
      .sort()
      .join(', ');
    const preemption = unresolvable
      ? `${n} Preemption is not helpful for scheduling.`
      : `${n} No preemption victims found for incoming pod.`;
    const message = `0/${n} nodes are available: ${histogram}. preemption: 0/${n} nodes are available: ${preemption}`;
    this.unschedulable.add(key);
    const cond = (pod.status?.conditions ?? []).find((c: any) => c.type === 'PodScheduled');
    if (!cond || cond.status !== 'False' || cond.message !== message) {
      const updated = this.store.update('pods', namespace, name, (p) => {
        p.status ??= { phase: 'Pending' };
        p.status.conditions = [
          ...(p.status.conditions ?? []).filter((c: any) => c.type !== 'PodScheduled'),
          {
            type: 'PodScheduled',
            status: 'False',
            lastProbeTime: null,
            lastTransitionTime: now(),
            reason: 'Unschedulable',
            message,
          },
        ];
      });
      if (updated)
        this.recorder.record(updated, {
          type: 'Warning',
          reason: 'FailedScheduling',
          message,
          component: 'default-scheduler',
        });
    }
    // The scheduler's periodic flush of unschedulable pods, shortened for tests.
    if (!this.retryTimer) {
      this.retryTimer = setInterval(() => {
        if (this.unschedulable.size === 0) {
          clearInterval(this.retryTimer);
          this.retryTimer = undefined;
          return;
        }
        this.retryPending();
      }, 1000);
    }
  }

  private bind(pod: KubeObject, node: FakeNode): void {
    const ns = pod.metadata.namespace!;
    const bound = this.store.update('pods', ns, pod.metadata.name, (p) => {
      p.spec.nodeName = node.name;
      p.status ??= { phase: 'Pending' };
      p.status.conditions = [
        ...(p.status.conditions ?? []).filter((c: any) => c.type !== 'PodScheduled'),
        { type: 'PodScheduled', status: 'True', lastProbeTime: null, lastTransitionTime: now() },
      ];
    });
    if (!bound) return;
    this.recorder.record(bound, {
      type: 'Normal',
      reason: 'Scheduled',
      message: `Successfully assigned ${ns}/${pod.metadata.name} to ${node.name}`,
      component: 'default-scheduler',
    });
    this.onBound(ns, pod.metadata.name);
  }
}
