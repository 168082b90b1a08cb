import type { Attempt } from '../executor.js';
import { podName } from '../../core/pod-identity.js';

/** One attempt whose pod the executor follows, from before its create until its pod is over. */
export interface PodAttempt {
  attempt: Attempt;
  name: string;
  namespace: string;
  /** When the create was sent (ms, performance clock): the start latency is measured from here. */
  createdAt: number;
  /** The pending reason written last, so an unchanged one is not written again. */
  pendingReason: string | null;
  /** The pending reason the pod's status gives (null: none). */
  statusReason: string | null;
  /** Its latest Warning event as a pending reason, used while the status gives only a generic one. */
  eventReason: string | null;
  /**
   * When its events were last listed (ms, performance clock); null: never. Infinity while a list is in flight
   * (a slow API server gets one at a time).
   */
  eventsAt: number | null;
  /** Unschedulable since (ms), for the pending timeout; null while it is not. */
  unschedulableSince: number | null;
  running: boolean;
  /** When its pod was first seen running (ms, performance clock). */
  runningAt: number | null;
  /** Its agent has reported it started (read from the store): its keepalives speak for it from now on. */
  agentStarted: boolean;
  /**
   * While its create waits for earlier tries' pods to be gone (outside the dispatch drainers):
   * their names. Null once it may be created.
   */
  waitingFor: { pods: string[] } | null;
  /** Set once its end is decided here (failed to start, lost) or its pod is over: nothing more is reported. */
  over: boolean;
}

const podKey = (namespace: string, name: string) => `${namespace}/${name}`;

/** The attempts followed, found by TI id (dispatch, cancel) and by pod (watch events). */
export class PodAttempts {
  readonly #byTi = new Map<string, PodAttempt>();
  readonly #byPod = new Map<string, PodAttempt>();

  get size(): number {
    return this.#byTi.size;
  }

  byTi(tiId: string): PodAttempt | undefined {
    return this.#byTi.get(tiId);
  }

  byPod(namespace: string, name: string): PodAttempt | undefined {
    return this.#byPod.get(podKey(namespace, name));
  }

  values(): IterableIterator<PodAttempt> {
    return this.#byTi.values();
  }

  track(attempt: Attempt, namespace: string, createdAt: number): PodAttempt {
    const p: PodAttempt = {
      attempt,
      name: podName(attempt),
      namespace,
      createdAt,
      pendingReason: null,
      statusReason: null,
      eventReason: null,
      eventsAt: null,
      unschedulableSince: null,
      running: false,
      runningAt: null,
      agentStarted: false,
      waitingFor: null,
      over: false,
    };
    this.#byTi.set(attempt.tiId, p);
    this.#byPod.set(podKey(namespace, p.name), p);
    return p;
  }

  /** Forgets `p`, unless a later attempt of its TI (or pod name) has taken its place. */
  untrack(p: PodAttempt): void {
    if (this.#byTi.get(p.attempt.tiId) === p) this.#byTi.delete(p.attempt.tiId);
    const key = podKey(p.namespace, p.name);
    if (this.#byPod.get(key) === p) this.#byPod.delete(key);
  }

  clear(): void {
    this.#byTi.clear();
    this.#byPod.clear();
  }
}
