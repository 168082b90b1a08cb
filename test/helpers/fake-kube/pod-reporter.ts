import type { EventRecorder } from './event-recorder.js';
import type { KubeObject, ObjectStore } from './object-store.js';
import type { PodRuntime } from './pod-runtime.js';
import { summarizeStatus } from './pod-status.js';

/** How the fake kubelet reports what happens: events about a pod, and its status with the phase recomputed. */
export class PodReporter {
  constructor(
    readonly store: ObjectStore,
    readonly recorder: EventRecorder,
  ) {}

  event(rt: PodRuntime, type: 'Normal' | 'Warning', reason: string, message: string, container?: string): void {
    const pod = this.store.get('pods', rt.namespace, rt.name);
    if (!pod) return;
    const e = { type, reason, message, component: 'kubelet' as const };
    this.recorder.record(pod, container ? { ...e, container } : e);
  }

  setContainer(rt: PodRuntime, name: string, change: (cs: any) => void): void {
    this.patchStatus(rt, (s) => {
      const cs = (s.containerStatuses ?? []).find((x: any) => x.name === name);
      if (cs) change(cs);
    });
  }

  /**
   * Changes the status and recomputes the phase and conditions from the containers, as the kubelet's
   * getPhase does: any container waiting (never run) → Pending; any running → Running; all stopped →
   * Succeeded if all exited 0, else Failed (Never), or Running while a restart is due.
   */
  patchStatus(rt: PodRuntime, change: (status: any, pod: KubeObject) => void, final = false): void {
    this.store.update('pods', rt.namespace, rt.name, (p) => {
      const s = (p.status ??= { phase: 'Pending' });
      change(s, p);
      summarizeStatus(s, p.spec.restartPolicy ?? 'Always', final);
    });
  }
}
