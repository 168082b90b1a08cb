import type { CoreV1Api } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import type { KubernetesStore } from './kubernetes-executor-options.js';
import { readLatestWarning } from './latest-warning.js';
import type { PodAttempt } from './pod-attempts.js';
import { isGenericPending } from './pod-condition.js';
import type { PodWatch } from './pod-watch.js';

/**
 * A pending pod's reason as its TI's pending reason: its status's, or its latest Warning event's
 * when the status says only something generic (ContainerCreating). Written only when it changed.
 */
export class PendingReasons {
  readonly #api: CoreV1Api;
  readonly #store: KubernetesStore;
  readonly #watches: ReadonlyMap<string, PodWatch>;
  readonly #log: Logger;

  constructor(o: { api: CoreV1Api; store: KubernetesStore; watches: ReadonlyMap<string, PodWatch>; log: Logger }) {
    this.#api = o.api;
    this.#store = o.store;
    this.#watches = o.watches;
    this.#log = o.log;
  }

  /**
   * Writes the pod's pending reason if it changed: its status's, or its latest warning's when the status's is
   * generic.
   */
  note(p: PodAttempt): void {
    const reason = isGenericPending(p.statusReason) && p.eventReason !== null ? p.eventReason : p.statusReason;
    if (reason === p.pendingReason) return;
    p.pendingReason = reason;
    void this.#store
      .pending(p.attempt, reason)
      .catch((err: unknown) => this.#log.warn({ err, tiId: p.attempt.tiId }, 'could not write a pending reason'));
  }

  /**
   * A pod long pending with no reason in its status (a volume that does not mount, a sandbox that
   * does not start): its latest Warning event says why. Listed from the sweep, rate-limited per
   * pod, not per watch event: a pod that starts quickly costs no list.
   */
  async readEvents(p: PodAttempt): Promise<void> {
    try {
      const reason = await readLatestWarning(
        this.#api,
        p.namespace,
        p.name,
        this.#watches.get(p.namespace)?.get(p.name)?.metadata?.uid,
      );
      if (reason === null || p.over || p.running) return;
      p.eventReason = reason;
      this.note(p);
    } catch (err) {
      this.#log.debug(
        { pod: p.name, namespace: p.namespace, err: (err as Error).message.split('\n')[0] },
        'could not list the events of a pending pod',
      );
    }
  }
}
