import { CoreV1Api, type KubeConfig, type V1Pod } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import type { Attempt, AttemptReporter, Executor } from '../executor.js';
import { createPod, type CreateOutcome } from './create-pod.js';
import { expiredFinishedPods } from './finished-pods.js';
import { readLatestWarning } from './latest-warning.js';
import { PodAttempts, type PodAttempt } from './pod-attempts.js';
import { isGenericPending, podCondition } from './pod-condition.js';
import { LABEL, labelValue, POD_SELECTOR, podName } from './pod-identity.js';
import { podLogTail } from './pod-log-tail.js';
import { podGraceSeconds, podManifest, podNamespace, type PodSettings } from './pod-manifest.js';
import { PodWatch } from './pod-watch.js';
import { attemptKey, podsAtLead } from './pods-at-lead.js';

/** The store operations the executor needs beyond the reporter (passed in: executors never import db). */
export interface KubernetesStore {
  /**
   * Ends an attempt as lost (its retries apply), guarded by its try and token and by being still
   * queued or running: false when it was over already (its agent reported, or it was cancelled).
   */
  lost(attempt: Attempt, error: string): Promise<boolean>;
  /** The pending reason of an attempt still queued (null clears it). */
  pending(attempt: Attempt, reason: string | null): Promise<void>;
  /** A pod is gone: its agent (named after it) is forgotten. */
  podGone(podName: string): Promise<void>;
  /** Every attempt of this executor still queued or running (at a change of leader). */
  active(): Promise<{ attempt: Attempt; running: boolean }[]>;
}

export interface KubernetesMetrics {
  podCreated(): void;
  podCreateError(reason: string): void;
  podStarted(seconds: number): void;
}

export interface KubernetesExecutorOptions {
  kubeConfig: KubeConfig;
  pods: PodSettings & {
    /** A pod unschedulable this long fails its attempt. */
    podPendingTimeoutMs: number;
    keepSucceededMs: number;
    keepFailedMs: number;
  };
  reporter: AttemptReporter;
  store: KubernetesStore;
  logger: Logger;
  metrics?: KubernetesMetrics;
  /** Told of each pod create once the server has answered for good (for its span). */
  podCreated?: (c: { attempt: Attempt; pod: string; namespace: string; start: Date; outcome: CreateOutcome['kind']; error: string | null }) => void;
  /** How long a create the server may accept later (429, 5xx, no answer) is retried. Default 5 min. */
  createRetryMs?: number;
  /** How long a retry waits for an earlier try's pod to be gone. Default: its grace period + 30 s. */
  previousGoneMs?: number;
  /** A create unanswered this long is sent again. Default 30 s. */
  requestTimeoutMs?: number;
  /** How often pending timeouts and finished pods' retention are looked at. Default 1 s. */
  sweepMs?: number;
  /**
   * A pod pending this long with no reason in its status has its events listed for one, and again
   * at most this often. Default 5 s.
   */
  pendingEventsMs?: number;
}

/**
 * A create with no answer this long is sent again (a hung connection must not hold a drainer for
 * ever); if the first one landed after all, the second gets AlreadyExists.
 */
const REQUEST_TIMEOUT_MS = 30_000;
/** The attempt's end waits for its log tail this long at most: a slow API server must not hold its retry. */
const LOG_TAIL_WAIT_MS = 5000;

/**
 * Runs each attempt as one pod (pod-manifest.ts) that runs `leoflow agent --once` for exactly
 * that attempt; its keepalives on the agent stream are the attempt's heartbeats. One watch per
 * namespace (pod-watch.ts) follows every pod: a pod that can never start, or that is lost, ends
 * its attempt at once with the pod's own reason (a failed one's with its last log lines); a
 * pending pod's reason is the TI's pending reason (its latest Warning event when its status says
 * only ContainerCreating). Only the leader creates and follows pods: on taking the lead it lists them by label,
 * adopts those of live attempts and deletes those of attempts that are over (`lead`).
 */
export class KubernetesExecutor implements Executor {
  readonly kind = 'kubernetes';
  readonly #o: KubernetesExecutorOptions;
  readonly #api: CoreV1Api;
  readonly #log: Logger;
  readonly #watches = new Map<string, PodWatch>();
  readonly #live = new PodAttempts();
  /** Waiters for a pod to be gone, by `namespace/name`. */
  readonly #gone = new Map<string, (() => void)[]>();
  /** When each finished pod was first seen finished (ms, wall clock), for retention. */
  readonly #finishedAt = new Map<string, number>();
  readonly #inFlight = new Set<Promise<unknown>>();
  #sweepTimer: NodeJS.Timeout | null = null;
  #leading = false;
  /** Counts the times this replica stopped leading: work begun under an earlier lead stops. */
  #epoch = 0;
  #shutdown = false;

  constructor(o: KubernetesExecutorOptions) {
    this.#o = o;
    this.#api = o.kubeConfig.makeApiClient(CoreV1Api);
    this.#log = o.logger;
  }

  get activeCount(): number {
    return this.#live.size;
  }

  /**
   * A pod the API shows pending (pulling, scheduling) is alive though its agent has not connected
   * yet: the heartbeat reaper must not take its attempt. Once it runs, its keepalives speak for it.
   */
  holdsLive(tiId: string, attemptToken: string): boolean {
    const p = this.#live.byTi(tiId);
    return p !== undefined && p.attempt.attemptToken === attemptToken && !p.over && !p.running;
  }

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
    this.#log.info({ tiId, pod: p.name, namespace: p.namespace, reason }, 'deleting the pod of a stopped attempt');
    void this.#deletePod(p.namespace, p.name, podGraceSeconds(this.#o.pods.killGraceMs));
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
    const found = podsAtLead(active, this.#watches.values(), (ns, name) => this.#live.byPod(ns, name) !== undefined);
    let adopted = 0;
    for (const { attempt, namespace, pod } of found.adopt) {
      if (this.#live.byTi(attempt.tiId)) continue;
      const created = pod.metadata!.creationTimestamp;
      this.#onPod(this.#live.track(attempt, namespace, created ? performance.now() - (Date.now() - new Date(created).getTime()) : performance.now()), 'MODIFIED', pod);
      adopted++;
    }
    // Its attempt is over (ended, reaped, retried): the pod must not run on beside the next. Read
    // again first: an attempt claimed since the first read (by the leader before us, in an
    // overlap) has a pod that is not a stray.
    const current = found.strays.length === 0 ? new Map<string, Attempt>() : new Map((await this.#o.store.active()).map((r) => [attemptKey(r.attempt), r.attempt]));
    let deleted = 0;
    for (const s of found.strays) {
      if (this.#live.byPod(s.namespace, s.name) || epoch !== this.#epoch) continue;
      const late = current.get(s.key);
      const pod = this.#watches.get(s.namespace)?.get(s.name);
      if (late && podName(late) === s.name) {
        if (pod && !this.#live.byTi(late.tiId)) {
          adopted++;
          this.#onPod(this.#live.track(late, s.namespace, performance.now()), 'MODIFIED', pod);
        }
        continue;
      }
      deleted++;
      void this.#deletePod(s.namespace, s.name, 0);
    }
    const missing = active.filter((a) => !this.#live.byTi(a.tiId));
    for (const a of missing) {
      if (!running.has(a.tiId)) {
        // Queued, its pod never created or not yet visible: create it (idempotent by its name).
        void this.dispatch(a).catch((err: unknown) => this.#log.error({ err, tiId: a.tiId }, 'could not create the pod of an adopted attempt'));
      } else {
        void this.#o.store.lost(a, `POD_GONE: no pod ${podName(a)} in namespace ${podNamespace(a, this.#o.pods)} when this replica took the lead`);
      }
    }
    this.#log.info({ namespaces: [...namespaces], adopted, deleted, recreated: missing.filter((a) => !running.has(a.tiId)).length }, 'took the lead: pods adopted');
  }

  /** Pods outlive the control plane: nothing is deleted; watches stop once creates in flight end. */
  async shutdown(_waitMs: number): Promise<void> {
    this.#shutdown = true;
    await Promise.allSettled([...this.#inFlight]);
    this.#stopWatching();
  }

  async #dispatch(attempt: Attempt): Promise<void> {
    const namespace = podNamespace(attempt, this.#o.pods);
    const name = podName(attempt);
    const watch = this.#watch(namespace);
    await watch.ready;
    if (!(await this.#earlierTriesGone(watch, attempt))) return;
    const p = this.#live.track(attempt, namespace, performance.now());
    const created = await this.#create(p);
    if (!created) return;
    // The watch may have told of the pod before the create answered: look at it now.
    const pod = watch.get(name);
    if (pod) this.#onPod(p, 'MODIFIED', pod);
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
    this.#o.podCreated?.({ attempt: p.attempt, pod: p.name, namespace: p.namespace, start, outcome: outcome.kind, error: outcome.kind === 'failed' ? outcome.error : null });
    switch (outcome.kind) {
      case 'created':
        this.#o.metrics?.podCreated();
        this.#log.debug({ tiId: p.attempt.tiId, try: p.attempt.tryNumber, pod: p.name, namespace: p.namespace }, 'pod created');
        return true;
      case 'exists':
        // A leader overlap or a retried create: the pod of this attempt is there, by its name.
        this.#log.info({ tiId: p.attempt.tiId, pod: p.name }, 'pod exists already (AlreadyExists): following it');
        return true;
      case 'failed':
        await this.#fail(p, outcome.error);
        return false;
      case 'abandoned':
        // No longer ours to create: the next leader lists the queued attempt and creates it.
        this.#live.untrack(p);
        return false;
    }
  }

  /**
   * Before a try's pod is created, the pods of earlier tries of its TI that may still run are
   * deleted and seen gone, so two tries never run at once. False (the attempt failed, saying
   * why) when one is not gone in time: a pod on a node that stopped answering cannot be proven
   * gone, and starting beside it could run the task twice.
   */
  async #earlierTriesGone(watch: PodWatch, attempt: Attempt): Promise<boolean> {
    const ti = labelValue(attempt.tiId);
    const earlier = [...watch.pods()].filter((pod) => {
      const l = pod.metadata?.labels;
      const cond = podCondition(pod);
      return l?.[LABEL.ti] === ti && Number(l[LABEL.try]) < attempt.tryNumber && cond.kind !== 'succeeded' && cond.kind !== 'failed';
    });
    if (earlier.length === 0) return true;
    const grace = podGraceSeconds(this.#o.pods.killGraceMs);
    const waitMs = this.#o.previousGoneMs ?? grace * 1000 + 30_000;
    const names = earlier.map((pod) => pod.metadata!.name!);
    this.#log.warn({ tiId: attempt.tiId, try: attempt.tryNumber, pods: names }, 'deleting the pods of earlier tries before the new try starts');
    const gone = await Promise.all(names.map((name) => {
      const seen = this.#whenGone(watch.namespace, name, waitMs);
      void this.#deletePod(watch.namespace, name, grace);
      return seen;
    }));
    if (gone.every(Boolean)) return true;
    const error = `POD_PREVIOUS_TRY_NOT_GONE: the pod of an earlier try (${names.filter((_, i) => !gone[i]).join(', ')}) was not gone within ${Math.round(waitMs / 1000)}s; not starting beside it`;
    const p = this.#live.track(attempt, watch.namespace, performance.now());
    await this.#fail(p, error);
    return false;
  }

  #whenGone(namespace: string, name: string, timeoutMs: number): Promise<boolean> {
    if (!this.#watches.get(namespace)?.get(name)) return Promise.resolve(true);
    return new Promise((resolve) => {
      const key = `${namespace}/${name}`;
      const timer = setTimeout(() => resolve(false), timeoutMs);
      const list = this.#gone.get(key) ?? [];
      list.push(() => {
        clearTimeout(timer);
        resolve(true);
      });
      this.#gone.set(key, list);
    });
  }

  #watch(namespace: string): PodWatch {
    let w = this.#watches.get(namespace);
    if (!w) {
      w = new PodWatch({
        kubeConfig: this.#o.kubeConfig,
        namespace,
        labelSelector: POD_SELECTOR,
        logger: this.#log,
        onEvent: (type, pod) => this.#onEvent(namespace, type, pod),
      });
      this.#watches.set(namespace, w);
    }
    this.#sweepTimer ??= setInterval(() => this.#sweep(), this.#o.sweepMs ?? 1000);
    this.#sweepTimer.unref();
    return w;
  }

  #stopWatching(): void {
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
      for (const w of this.#gone.get(key) ?? []) w();
      this.#gone.delete(key);
      void this.#o.store.podGone(pod.metadata!.name!).catch((err: unknown) => this.#log.warn({ err, pod: pod.metadata?.name }, 'could not forget the agent of a deleted pod'));
    }
    const p = this.#live.byPod(namespace, pod.metadata!.name!);
    if (p) this.#onPod(p, type, pod);
  }

  /** What a pod's change means for its attempt. */
  #onPod(p: PodAttempt, type: 'ADDED' | 'MODIFIED' | 'DELETED', pod: V1Pod): void {
    if (p.over) {
      if (type === 'DELETED') this.#live.untrack(p);
      return;
    }
    if (type === 'DELETED') {
      this.#live.untrack(p);
      void this.#lose(p, `POD_DELETED: pod ${p.name} in namespace ${p.namespace} was deleted before its attempt ended`);
      return;
    }
    const cond = podCondition(pod);
    switch (cond.kind) {
      case 'pending':
        if (cond.unschedulable) p.unschedulableSince ??= performance.now();
        else p.unschedulableSince = null;
        p.statusReason = cond.reason;
        this.#notePending(p);
        return;
      case 'cannot-start':
        // It will never start; deleted at once so that it cannot start later beside the retry.
        void this.#fail(p, `POD_CANNOT_START:${cond.reason}`, 0);
        return;
      case 'running':
        if (!p.running) {
          p.running = true;
          this.#o.metrics?.podStarted((performance.now() - p.createdAt) / 1000);
          if (p.pendingReason !== null) {
            p.pendingReason = null;
            void this.#o.store.pending(p.attempt, null).catch((err: unknown) => this.#log.warn({ err, tiId: p.attempt.tiId }, 'could not clear a pending reason'));
          }
        }
        return;
      case 'succeeded':
        // The agent exits 0 once its attempt's end is recorded: nothing to say, unless it never
        // got its attempt (it was over before the pod started), which the guarded write ignores.
        p.over = true;
        this.#live.untrack(p);
        void this.#o.store.lost(p.attempt, `POD_SUCCEEDED_WITHOUT_REPORT: pod ${p.name} ended without the attempt's end being recorded`).catch(() => {});
        return;
      case 'failed':
        p.over = true;
        this.#live.untrack(p);
        void this.#lose(p, `POD_FAILED:${cond.reason}`, true);
        return;
      case 'lost':
        // Its node stopped answering: the pod may run on there, which no one can prove otherwise.
        // The attempt ends now (its token dies with it, so nothing the old pod reports is applied)
        // and the pod is deleted, so the node kills it if it comes back.
        p.over = true;
        void this.#lose(p, `POD_LOST:${cond.reason}`);
        void this.#deletePod(p.namespace, p.name, 0);
        return;
    }
  }

  /** Pending timeouts, and finished pods removed once their retention has passed. */
  #sweep(): void {
    const now = performance.now();
    const limit = this.#o.pods.podPendingTimeoutMs;
    const longer = `(pending longer than ${Math.round(limit / 1000)}s)`;
    const eventsMs = this.#o.pendingEventsMs ?? 5000;
    for (const p of this.#live.values()) {
      if (p.over || p.running) continue;
      if (isGenericPending(p.statusReason) && now - p.createdAt >= eventsMs && (p.eventsAt === null || now - p.eventsAt >= eventsMs)) {
        p.eventsAt = Number.POSITIVE_INFINITY;
        void this.#readEvents(p).finally(() => (p.eventsAt = performance.now()));
      }
      if (p.unschedulableSince !== null && now - p.unschedulableSince >= limit) {
        void this.#fail(p, `POD_UNSCHEDULABLE:${(p.pendingReason ?? '').replace(/^POD_PENDING:(Unschedulable:)?/, '')} ${longer}`, 0);
      } else if (p.unschedulableSince === null && now - p.createdAt >= limit) {
        // Scheduled but never running (a volume that does not mount, a sandbox that does not
        // start): held live while pending, so this bound is the only one it has.
        void this.#fail(p, `POD_PENDING_TIMEOUT:${(p.pendingReason ?? 'POD_PENDING').replace(/^POD_PENDING:?/, '') || 'no reason given'} ${longer}`, 0);
      }
    }
    for (const pod of expiredFinishedPods(this.#watches.values(), this.#finishedAt, this.#o.pods, Date.now())) void this.#deletePod(pod.namespace, pod.name, 0);
  }

  /** The attempt failed here (its pod refused or never going to start): reported, its retries apply. */
  async #fail(p: PodAttempt, error: string, deleteGraceS?: number): Promise<void> {
    if (p.over) return;
    p.over = true;
    this.#log.warn({ tiId: p.attempt.tiId, runId: p.attempt.runId, taskId: p.attempt.taskId, try: p.attempt.tryNumber, pod: p.name, error }, `task ${p.attempt.taskId}: ${error}`);
    if (deleteGraceS !== undefined) await this.#deletePod(p.namespace, p.name, deleteGraceS);
    this.#live.untrack(p);
    try {
      await this.#o.reporter.finished(p.attempt, { outcome: 'spawn_failed', exitCode: null, signal: null, error });
    } catch (err) {
      this.#log.error({ err, tiId: p.attempt.tiId }, 'could not record the end of an attempt whose pod failed');
    }
  }

  /** Writes the pod's pending reason if it changed: its status's, or its latest warning's when the status's is generic. */
  #notePending(p: PodAttempt): void {
    const reason = isGenericPending(p.statusReason) && p.eventReason !== null ? p.eventReason : p.statusReason;
    if (reason === p.pendingReason) return;
    p.pendingReason = reason;
    void this.#o.store.pending(p.attempt, reason).catch((err: unknown) => this.#log.warn({ err, tiId: p.attempt.tiId }, 'could not write a pending reason'));
  }

  /**
   * A pod long pending with no reason in its status (a volume that does not mount, a sandbox that
   * does not start): its latest Warning event says why. Listed from the sweep, rate-limited per
   * pod, not per watch event: a pod that starts quickly costs no list.
   */
  async #readEvents(p: PodAttempt): Promise<void> {
    try {
      const reason = await readLatestWarning(this.#api, p.namespace, p.name, this.#watches.get(p.namespace)?.get(p.name)?.metadata?.uid);
      if (reason === null || p.over || p.running) return;
      p.eventReason = reason;
      this.#notePending(p);
    } catch (err) {
      this.#log.debug({ pod: p.name, namespace: p.namespace, err: (err as Error).message.split('\n')[0] }, 'could not list the events of a pending pod');
    }
  }

  async #lose(p: PodAttempt, error: string, withLogTail = false): Promise<void> {
    if (withLogTail) {
      const tail = await podLogTail(this.#api, p.namespace, p.name, Math.min(LOG_TAIL_WAIT_MS, this.#o.requestTimeoutMs ?? REQUEST_TIMEOUT_MS), this.#log);
      if (tail !== '') error = `${error}; last lines: ${tail}`;
    }
    try {
      if (await this.#o.store.lost(p.attempt, error)) {
        this.#log.warn({ tiId: p.attempt.tiId, runId: p.attempt.runId, taskId: p.attempt.taskId, try: p.attempt.tryNumber, pod: p.name, error }, `task ${p.attempt.taskId} lost: ${error}`);
      }
    } catch (err) {
      this.#log.error({ err, tiId: p.attempt.tiId }, 'could not end a lost attempt (the heartbeat reaper will)');
    }
  }

  async #deletePod(namespace: string, name: string, gracePeriodSeconds: number): Promise<void> {
    try {
      await this.#api.deleteNamespacedPod({ namespace, name, gracePeriodSeconds });
    } catch (err) {
      if ((err as { code?: number }).code === 404) return;
      this.#log.warn({ namespace, pod: name, err: (err as Error).message.split('\n')[0] }, 'could not delete a pod (the next sweep or leader tries again)');
    }
  }
}

export function createKubernetesExecutor(o: KubernetesExecutorOptions): KubernetesExecutor {
  return new KubernetesExecutor(o);
}
