import { randomBytes } from 'node:crypto';
import type { KubeObject, ObjectStore } from './object-store.js';

/**
 * Core v1 Events about pods, as the scheduler and the kubelet record them: named
 * `<pod>.<hex>`, with involvedObject, source and reporting component, and a repeat of the same
 * reason and message counted on the existing event (count, lastTimestamp) as the event
 * correlator does, instead of a new one.
 */
export interface PodEvent {
  type: 'Normal' | 'Warning';
  reason: string;
  message: string;
  /** `default-scheduler` or `kubelet`. */
  component: 'default-scheduler' | 'kubelet' | string;
  /** The container the event is about, as `spec.containers{name}`. */
  container?: string;
}

export class EventRecorder {
  constructor(private readonly store: ObjectStore) {}

  record(pod: KubeObject, e: PodEvent): void {
    const ns = pod.metadata.namespace ?? 'default';
    const now = new Date().toISOString().replace(/\.\d+Z$/, 'Z');
    const same = this.store
      .list('events', ns)
      .find((ev) => ev.involvedObject?.uid === pod.metadata.uid && ev.reason === e.reason && ev.message === e.message && ev.source?.component === e.component);
    if (same) {
      this.store.update('events', ns, same.metadata.name, (ev) => {
        ev.count = (ev.count ?? 1) + 1;
        ev.lastTimestamp = now;
      });
      return;
    }
    const involvedObject: Record<string, string> = {
      kind: 'Pod',
      namespace: ns,
      name: pod.metadata.name,
      uid: pod.metadata.uid ?? '',
      apiVersion: 'v1',
      resourceVersion: pod.metadata.resourceVersion ?? '',
    };
    if (e.container) involvedObject.fieldPath = `spec.containers{${e.container}}`;
    const source: Record<string, string> = { component: e.component };
    if (e.component === 'kubelet' && pod.spec?.nodeName) source.host = pod.spec.nodeName;
    this.store.create('events', {
      metadata: {
        name: `${pod.metadata.name}.${randomBytes(8).toString('hex')}`,
        namespace: ns,
        uid: crypto.randomUUID(),
        creationTimestamp: now,
      },
      involvedObject,
      reason: e.reason,
      message: e.message,
      source,
      firstTimestamp: now,
      lastTimestamp: now,
      count: 1,
      type: e.type,
      eventTime: null,
      reportingComponent: e.component,
      reportingInstance: e.component === 'kubelet' ? (pod.spec?.nodeName ?? '') : '',
    });
  }
}
