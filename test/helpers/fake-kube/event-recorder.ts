import { randomBytes } from 'node:crypto';
import type { KubeObject, ObjectStore } from './object-store.js';
import { now } from './timestamp.js';

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
  /** The event already recorded for (pod uid, reason, message, component), by name. */
  private readonly seen = new Map<string, string>();

  constructor(private readonly store: ObjectStore) {}

  record(pod: KubeObject, e: PodEvent): void {
    const ns = pod.metadata.namespace ?? 'default';
    const at = now();
    const key = `${pod.metadata.uid}\n${e.reason}\n${e.message}\n${e.component}`;
    const same = this.seen.get(key);
    if (same !== undefined) {
      const bumped = this.store.update('events', ns, same, (ev) => {
        ev.count = (ev.count ?? 1) + 1;
        ev.lastTimestamp = at;
      });
      if (bumped) return;
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
    const name = `${pod.metadata.name}.${randomBytes(8).toString('hex')}`;
    this.seen.set(key, name);
    this.store.create('events', {
      metadata: {
        name,
        namespace: ns,
        uid: crypto.randomUUID(),
        creationTimestamp: at,
      },
      involvedObject,
      reason: e.reason,
      message: e.message,
      source,
      firstTimestamp: at,
      lastTimestamp: at,
      count: 1,
      type: e.type,
      eventTime: null,
      reportingComponent: e.component,
      reportingInstance: e.component === 'kubelet' ? (pod.spec?.nodeName ?? '') : '',
    });
  }
}
