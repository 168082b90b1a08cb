import { CoreV1Api, type V1Pod } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import type { Attempt, Executor } from '../executor.js';
import { adoptPodsAtLead } from './adopt-pods-at-lead.js';
import { applyPodChange, type PodChangeContext } from './apply-pod-change.js';
import { createPod } from './create-pod.js';
import { endPodsWithAttempts, type PodsEndContext } from './end-pods-with-attempts.js';
import {
  earlierTriesPods,
  noteEarlierTries,
  waitForEarlierTries,
  type EarlierTriesContext,
} from './earlier-tries-gone.js';
import type { KubernetesExecutorOptions } from './kubernetes-executor-options.js';
import { PendingReasons } from './pending-reasons.js';
import { PodAttemptEnds } from './pod-attempt-ends.js';
import { PodAttempts, type PodAttempt } from './pod-attempts.js';
import { PodGoneWaiters } from './pod-gone-waiters.js';
import { installSelector } from './install-label.js';
import { podGraceSeconds, podManifest, podNamespace } from './pod-manifest.js';
import { PodWatch } from './pod-watch.js';
import { sweepPods, type SweepContext } from './sweep-pods.js';

/**
 * A create with no answer this long is sent again (a hung connection must not hold a drainer for
 * ever); if the first one landed after all, the second gets AlreadyExists.
 */
const REQUEST_TIMEOUT_MS = 30_000;

/**
 * Runs each attempt as one pod (pod-manifest.ts) that runs `leoflow agent --once` for exactly
 * that attempt; its keepalives on the agent stream are the attempt's heartbeats. One watch per
 * namespace (pod-watch.ts) follows every pod: a pod that can never start, or that is lost, ends
 * its attempt at once with the pod's own reason (a failed one's with its last log lines); a
 * pending pod's reason is the TI's pending reason (its latest Warning event when its status says
 * only ContainerCreating). Only the leader creates and follows pods: on taking the lead it lists them by label,
 * adopts those of live attempts and deletes those of attempts that are over (`lead`). A retry whose
 * earlier try's pod is still there waits for it outside the dispatch drainers (earlier-tries-gone.ts).
 * What a pod's change means is apply-pod-change.ts; what the clock decides, sweep-pods.ts.
 */
export class KubernetesExecutor implements Executor {
  readonly kind = 'kubernetes';
  readonly #o: KubernetesExecutorOptions;
  readonly #api: CoreV1Api;
  readonly #log: Logger;
  readonly #watches = new Map<string, PodWatch>();
  readonly #live = new PodAttempts();
  readonly #gone = new PodGoneWaiters();
  /** Retries whose create waits for earlier tries' pods to be gone. */
  readonly #parked = new Set<PodAttempt>();
  /** When each finished pod was first seen finished (ms, wall clock), for retention. */
  readonly #finishedAt = new Map<string, number>();
  readonly #inFlight = new Set<Promise<unknown>>();
  readonly #ends: PodAttemptEnds;
  readonly #change: PodChangeContext;
  readonly #sweep: SweepContext;
  readonly #earlier: EarlierTriesContext;
  readonly #podsEnd: PodsEndContext;
  /**
   * When the attempts of live pods were last read from the store (ms, performance clock); Infinity while a
   * read is in flight.
   */
  #standingsAt = 0;
  #sweepTimer: NodeJS.Timeout | null = null;
  #leading = false;
  /** Counts the times this replica stopped leading: work begun under an earlier lead stops. */
  #epoch = 0;
  #shutdown = false;

  constructor(o: KubernetesExecutorOptions) {
    this.#o = o;
    this.#api = o.kubeConfig.makeApiClient(CoreV1Api);
    this.#log = o.logger;
    const live = this.#live;
    const watches = this.#watches;
    const ends = new PodAttemptEnds({
      api: this.#api,
      reporter: o.reporter,
      store: o.store,
      live,
      log: o.logger,
      requestTimeoutMs: o.requestTimeoutMs ?? REQUEST_TIMEOUT_MS,
    });
    const pending = new PendingReasons({ api: this.#api, store: o.store, watches, log: o.logger });
    this.#ends = ends;
    this.#change = {
      live,
      ends,
      pending,
      store: o.store,
      metrics: o.metrics,
      log: o.logger,
      graceSeconds: podGraceSeconds(o.pods.killGraceMs),
    };
    this.#earlier = {
      ends,
      gone: this.#gone,
      pending,
      watches,
      log: o.logger,
      killGraceMs: o.pods.killGraceMs,
    };
    this.#podsEnd = {
      live,
      watches,
      ends,
      store: o.store,
      log: o.logger,
      graceSeconds: podGraceSeconds(o.pods.killGraceMs),
      agentConnectMs: o.agentConnectMs ?? 60_000,
      serverUrl: o.pods.serverUrl,
    };
    this.#sweep = {
      live,
      watches,
      finishedAt: this.#finishedAt,
      ends,
      pending,
      pods: o.pods,
      graceSeconds: podGraceSeconds(o.pods.killGraceMs),
      pendingEventsMs: o.pendingEventsMs ?? 5000,
      parked: (p) => noteEarlierTries(this.#earlier, p),
      reread: (p, pod) => applyPodChange(this.#change, p, 'MODIFIED', pod),
    };
  }

  get activeCount(): number {
    return this.#live.size;
  }

  /**
   * A pod the API shows pending (pulling, scheduling) or running before its agent has reported the
   * attempt started, or a retry waiting for an earlier try's pod to be gone, is alive though no
   * agent speaks for it yet: the heartbeat reaper must not take its attempt (a running pod whose
   * agent never connects is failed here, end-pods-with-attempts.ts). Once its pod is seen running
   * and its agent has started the attempt, its keepalives speak for it.
   */
  holdsLive(tiId: string, attemptToken: string): boolean {
    const p = this.#live.byTi(tiId);
    return p !== undefined && p.attempt.attemptToken === attemptToken && !p.over && !(p.running && p.agentStarted);
  }

  /**
   * Resolves once the API server has the attempt's pod, or once the attempt waits (parked, held
   * live) for an earlier try's pod to be gone: a drainer never waits on another try's pod.
   */
  async dispatch(attempt: Attempt): Promise<void> {
    if (this.#shutdown) throw new Error(`kubernetes executor is shutting down: not creating a pod for ${attempt.tiId}`);
    const work = this.#dispatch(attempt);
    this.#inFlight.add(work);
    try {
      await work;
    } finally {
      this.#inFlight.delete(work);
    }
  }

  cancel(tiId: string, reason: string): boolean {
    const p = this.#live.byTi(tiId);
    if (!p) return false;
    if (p.waitingFor) {
      // No pod of its own yet: it is simply never created.
      p.over = true;
      this.#live.untrack(p);
      return true;
    }
    this.#log.info({ tiId, pod: p.name, namespace: p.namespace, reason }, 'deleting the pod of a stopped attempt');
    void this.#ends.deletePod(p.namespace, p.name, podGraceSeconds(this.#o.pods.killGraceMs));
    return true;
  }

  /**
   * This replica leads (or no longer does). Taking the lead: list our pods in every namespace in
   * use, follow those of live attempts, delete those of attempts that are over, create again the
   * pods of queued attempts whose create an earlier leader may not have sent (the name is the
   * same: a duplicate is AlreadyExists), and end as lost the running attempts whose pod is gone.
   * Losing it: stop watching; the pods run on and the next leader takes them.
   */
  async lead(yes: boolean): Promise<void> {
    if (!yes) {
      this.#leading = false;
      this.#epoch++;
      this.#stopWatching();
      return;
    }
    if (this.#leading || this.#shutdown) return;
    this.#leading = true;
    const epoch = this.#epoch;
    let rows;
    try {
      rows = await this.#o.store.active();
    } catch (err) {
      // Not adopted: the next lead tries again; meanwhile the heartbeat reaper is the safety net.
      this.#leading = false;
      throw err;
    }
    const active = rows.map((r) => r.attempt);
    const running = new Set(rows.filter((r) => r.running).map((r) => r.attempt.tiId));
    const namespaces = new Set([this.#o.pods.namespace, ...active.map((a) => podNamespace(a, this.#o.pods))]);
    await Promise.all([...namespaces].map((ns) => this.#watch(ns).ready));
    if (epoch !== this.#epoch) return;
    const { adopted, deleted, recreated } = await adoptPodsAtLead(
      {
        live: this.#live,
        watches: this.#watches,
        store: this.#o.store,
        ends: this.#ends,
        pods: this.#o.pods,
        log: this.#log,
        stillLeading: () => epoch === this.#epoch,
        onPod: (p, type, pod) => applyPodChange(this.#change, p, type, pod),
        dispatch: (a) => this.dispatch(a),
      },
      active,
      running,
    );
    this.#log.info({ namespaces: [...namespaces], adopted, deleted, recreated }, 'took the lead: pods adopted');
  }

  /** Pods outlive the control plane: nothing is deleted; watches stop once creates in flight end. */
  async shutdown(_waitMs: number): Promise<void> {
    this.#shutdown = true;
    await Promise.allSettled([...this.#inFlight]);
    this.#stopWatching();
  }

  async #dispatch(attempt: Attempt): Promise<void> {
    const namespace = podNamespace(attempt, this.#o.pods);
    const watch = this.#watch(namespace);
    await watch.ready;
    const earlier = earlierTriesPods(watch, attempt);
    const p = this.#live.track(attempt, namespace, performance.now());
    if (earlier.length > 0) {
      void this.#createAfterEarlierTries(p, earlier);
      return;
    }
    await this.#createAndFollow(p);
  }

  async #createAndFollow(p: PodAttempt): Promise<void> {
    if (!(await this.#create(p))) return;
    // The watch may have told of the pod before the create answered: look at it now.
    const pod = this.#watches.get(p.namespace)?.get(p.name);
    if (pod) applyPodChange(this.#change, p, 'MODIFIED', pod);
  }

  /** Parked: waits for the earlier tries' pods to be gone, then creates the retry's pod. */
  async #createAfterEarlierTries(p: PodAttempt, earlier: string[]): Promise<void> {
    const epoch = this.#epoch;
    const stillWanted = () => !this.#shutdown && epoch === this.#epoch && !p.over;
    this.#parked.add(p);
    let gone: boolean;
    try {
      gone = await waitForEarlierTries(this.#earlier, p, earlier, stillWanted);
    } finally {
      this.#parked.delete(p);
    }
    if (!gone) {
      if (!stillWanted()) this.#live.untrack(p);
      return;
    }
    p.statusReason = null;
    this.#change.pending.note(p);
    const work = this.#createAndFollow(p);
    this.#inFlight.add(work);
    try {
      await work;
    } catch (err) {
      this.#log.error(
        { err, tiId: p.attempt.tiId },
        'could not create the pod of a retry that waited for an earlier try',
      );
    } finally {
      this.#inFlight.delete(work);
    }
  }

  /** Sends the create until the server answers for good (create-pod.ts); false when the attempt was ended here. */
  async #create(p: PodAttempt): Promise<boolean> {
    const epoch = this.#epoch;
    const start = new Date();
    const outcome = await createPod({
      api: this.#api,
      namespace: p.namespace,
      body: podManifest(p.attempt, this.#o.pods),
      log: this.#log,
      retryMs: this.#o.createRetryMs ?? 300_000,
      requestTimeoutMs: this.#o.requestTimeoutMs ?? REQUEST_TIMEOUT_MS,
      stillWanted: () => !this.#shutdown && epoch === this.#epoch && !p.over,
      onSend: () => (p.createdAt = performance.now()),
      onError: (reason) => this.#o.metrics?.podCreateError(reason),
    });
    this.#o.podCreated?.({
      attempt: p.attempt,
      pod: p.name,
      namespace: p.namespace,
      start,
      outcome: outcome.kind,
      error: outcome.kind === 'failed' ? outcome.error : null,
    });
    switch (outcome.kind) {
      case 'created':
        // Known at once, whatever the watch's lag: a retry dispatched next must see it (earlier-tries-gone.ts).
        this.#watches.get(p.namespace)?.noteCreated(outcome.pod);
        this.#o.metrics?.podCreated();
        this.#log.debug(
          { tiId: p.attempt.tiId, try: p.attempt.tryNumber, pod: p.name, namespace: p.namespace },
          'pod created',
        );
        return true;
      case 'exists':
        // A leader overlap or a retried create: the pod of this attempt is there, by its name.
        this.#log.info({ tiId: p.attempt.tiId, pod: p.name }, 'pod exists already (AlreadyExists): following it');
        return true;
      case 'failed':
        await this.#ends.fail(p, outcome.error);
        return false;
      case 'abandoned':
        // No longer ours to create: the next leader lists the queued attempt and creates it.
        this.#live.untrack(p);
        return false;
    }
  }

  #watch(namespace: string): PodWatch {
    let w = this.#watches.get(namespace);
    if (!w) {
      w = new PodWatch({
        kubeConfig: this.#o.kubeConfig,
        namespace,
        labelSelector: installSelector(this.#o.pods.install),
        logger: this.#log,
        onEvent: (type, pod) => this.#onEvent(namespace, type, pod),
      });
      this.#watches.set(namespace, w);
    }
    this.#sweepTimer ??= setInterval(() => this.#sweepPods(), this.#o.sweepMs ?? 1000);
    this.#sweepTimer.unref();
    return w;
  }

  #sweepPods(): void {
    sweepPods(this.#sweep);
    const now = performance.now();
    if (now - this.#standingsAt < (this.#o.standingsMs ?? 5000)) return;
    this.#standingsAt = Number.POSITIVE_INFINITY;
    void endPodsWithAttempts(this.#podsEnd)
      .catch((err: unknown) =>
        this.#log.warn({ err }, 'could not read the attempts of live pods (the next sweep tries again)'),
      )
      .finally(() => (this.#standingsAt = performance.now()));
  }

  #stopWatching(): void {
    this.#gone.stopAll();
    for (const w of this.#watches.values()) w.close();
    this.#watches.clear();
    if (this.#sweepTimer) clearInterval(this.#sweepTimer);
    this.#sweepTimer = null;
    this.#live.clear();
    this.#finishedAt.clear();
  }

  #onEvent(namespace: string, type: 'ADDED' | 'MODIFIED' | 'DELETED', pod: V1Pod): void {
    const key = `${namespace}/${pod.metadata?.name}`;
    if (type === 'DELETED') {
      this.#finishedAt.delete(key);
      this.#gone.gone(key);
      void this.#o.store
        .podGone(pod.metadata!.name!)
        .catch((err: unknown) =>
          this.#log.warn({ err, pod: pod.metadata?.name }, 'could not forget the agent of a deleted pod'),
        );
    }
    const name = pod.metadata!.name!;
    // Told first, while the pod is still as it was: a retry waiting for it says why.
    if (type === 'MODIFIED')
      for (const w of this.#parked)
        if (w.namespace === namespace && w.waitingFor?.pods.includes(name)) noteEarlierTries(this.#earlier, w);
    const p = this.#live.byPod(namespace, name);
    if (p) applyPodChange(this.#change, p, type, pod);
  }
}

export function createKubernetesExecutor(o: KubernetesExecutorOptions): KubernetesExecutor {
  return new KubernetesExecutor(o);
}
