/**
 * One watch of our pods in one namespace, and the cache it keeps: a list, then a watch from the
 * list's resourceVersion with bookmarks (so a reconnect resumes where it left off), and a new list
 * when the server says 410 Gone (the version was compacted away). Pods that vanished between two
 * lists are told as DELETED, so a pod deleted while we were not watching is never missed.
 */
import { CoreV1Api, Watch, type KubeConfig, type V1Pod } from '@kubernetes/client-node';
import type { Logger } from 'pino';

export type PodEventType = 'ADDED' | 'MODIFIED' | 'DELETED';

export interface PodWatchOptions {
  kubeConfig: KubeConfig;
  namespace: string;
  labelSelector: string;
  onEvent(type: PodEventType, pod: V1Pod): void;
  logger: Logger;
  /** Server-side timeout of one watch request; it is renewed from the last version. Default 45 s. */
  watchTimeoutS?: number;
}

/**
 * The API server ends a watch at its timeoutSeconds whatever happens on it; one silent (no event,
 * no bookmark) this much longer is a half-open connection, and is given up for a new one. With the
 * default timeout, a black-holed watch is noticed within a minute.
 */
const SILENCE_MARGIN_MS = 10_000;

/** Reconnect delays after an error: from 250 ms, doubling, up to 15 s. */
const MIN_BACKOFF_MS = 250;
const MAX_BACKOFF_MS = 15_000;

export class PodWatch {
  readonly namespace: string;
  /** Settles after the first list, answered or not (a missing namespace must not block dispatch). */
  readonly ready: Promise<void>;
  readonly #o: PodWatchOptions;
  readonly #api: CoreV1Api;
  readonly #pods = new Map<string, V1Pod>();
  /** The uids of the pods seen deleted lately (bounded), so a late `noteCreated` adds no ghost. */
  readonly #deleted = new Set<string>();
  #resourceVersion: string | null = null;
  #abort: AbortController | null = null;
  #closed = false;
  #backoffMs = MIN_BACKOFF_MS;
  #timer: NodeJS.Timeout | null = null;
  /** Fires when the current watch has been silent past its timeout plus the margin. */
  #silence: NodeJS.Timeout | null = null;
  /** Watches given up as silent (half-open connections). */
  silentWatches = 0;
  #markReady!: () => void;
  /** Lists made, the first one included (a relist after 410 Gone adds one). */
  lists = 0;

  constructor(o: PodWatchOptions) {
    this.#o = o;
    this.namespace = o.namespace;
    this.#api = o.kubeConfig.makeApiClient(CoreV1Api);
    this.ready = new Promise((r) => (this.#markReady = r));
    void this.#relist();
  }

  get(name: string): V1Pod | undefined {
    return this.#pods.get(name);
  }

  /**
   * A pod this process has just created, as the API server answered: the watch's event for it may
   * come later, and until then a retry looking for its earlier tries' pods here must find it. Not
   * added when the watch has already seen it come and go (its uid among the recent deletions).
   * Its ADDED event, when it comes, is told as usual.
   */
  noteCreated(pod: V1Pod): void {
    const name = pod.metadata?.name;
    if (!name || this.#pods.has(name) || this.#deleted.has(pod.metadata?.uid ?? '')) return;
    this.#pods.set(name, pod);
  }

  pods(): IterableIterator<V1Pod> {
    return this.#pods.values();
  }

  close(): void {
    this.#closed = true;
    if (this.#timer) clearTimeout(this.#timer);
    if (this.#silence) clearTimeout(this.#silence);
    this.#abort?.abort();
    this.#markReady();
  }

  /** (Re)arms the silence timer of the current watch: any event or bookmark proves it alive. */
  #heard(timeoutS: number): void {
    if (this.#silence) clearTimeout(this.#silence);
    this.#silence = setTimeout(
      () => {
        if (this.#closed) return;
        this.silentWatches++;
        this.#o.logger.warn(
          { namespace: this.namespace, silentS: timeoutS + SILENCE_MARGIN_MS / 1000 },
          'pod watch: no event and no bookmark past its timeout (a half-open connection): watching again',
        );
        this.#abort?.abort();
      },
      timeoutS * 1000 + SILENCE_MARGIN_MS,
    );
    this.#silence.unref();
  }

  async #relist(): Promise<void> {
    if (this.#closed) return;
    this.lists++;
    try {
      const list = await this.#api.listNamespacedPod({
        namespace: this.namespace,
        labelSelector: this.#o.labelSelector,
      });
      if (this.#closed) return;
      const seen = new Set<string>();
      for (const pod of list.items) {
        const name = pod.metadata!.name!;
        seen.add(name);
        const had = this.#pods.get(name);
        this.#pods.set(name, pod);
        if (had?.metadata?.resourceVersion !== pod.metadata?.resourceVersion)
          this.#o.onEvent(had ? 'MODIFIED' : 'ADDED', pod);
      }
      for (const [name, pod] of this.#pods) {
        if (seen.has(name)) continue;
        this.#pods.delete(name);
        this.#rememberDeleted(pod);
        this.#o.onEvent('DELETED', pod);
      }
      this.#resourceVersion = list.metadata?.resourceVersion ?? null;
      this.#backoffMs = MIN_BACKOFF_MS;
      this.#markReady();
      await this.#watch();
    } catch (err) {
      this.#markReady();
      this.#retryLater(err, 'list');
    }
  }

  async #watch(): Promise<void> {
    if (this.#closed) return;
    let gone = false;
    const since = performance.now();
    const timeoutS = this.#o.watchTimeoutS ?? 45;
    const query: Record<string, string | number | boolean> = {
      labelSelector: this.#o.labelSelector,
      allowWatchBookmarks: true,
      timeoutSeconds: timeoutS,
    };
    if (this.#resourceVersion !== null) query.resourceVersion = this.#resourceVersion;
    const onEvent = (type: string, obj: unknown) => {
      if (this.#closed) return;
      this.#heard(timeoutS);
      if (type === 'ERROR') {
        const status = obj as { code?: number; message?: string };
        if (status.code === 410) gone = true;
        else this.#o.logger.warn({ namespace: this.namespace, status }, 'pod watch: error event');
        this.#abort?.abort();
        return;
      }
      const pod = obj as V1Pod;
      const rv = pod.metadata?.resourceVersion;
      if (rv) this.#resourceVersion = rv;
      if (type === 'BOOKMARK') return;
      const name = pod.metadata?.name;
      if (!name || (type !== 'ADDED' && type !== 'MODIFIED' && type !== 'DELETED')) return;
      if (type === 'DELETED') {
        this.#pods.delete(name);
        this.#rememberDeleted(pod);
      } else this.#pods.set(name, pod);
      this.#backoffMs = MIN_BACKOFF_MS;
      this.#o.onEvent(type, pod);
    };
    const onDone = (err: unknown) => {
      if (this.#silence) clearTimeout(this.#silence);
      if (this.#closed) return;
      const code = (err as { statusCode?: number } | null)?.statusCode;
      if (gone || code === 410) {
        this.#o.logger.info({ namespace: this.namespace }, 'pod watch: resource version gone (410): listing again');
        this.#resourceVersion = null;
        void this.#relist();
      } else if (err && (err as { name?: string }).name !== 'AbortError') {
        this.#retryLater(err, 'watch');
      } else {
        // The server ended the request (its timeout) or we aborted after an ERROR: go on from the last version.
        // A watch the server ends at once, again and again, is not renewed in a spin.
        this.#timer = setTimeout(
          () => void this.#watch(),
          err || performance.now() - since < 1000 ? this.#nextBackoff() : 0,
        );
        this.#timer.unref();
      }
    };
    this.#heard(timeoutS);
    try {
      this.#abort = await new Watch(this.#o.kubeConfig).watch(
        `/api/v1/namespaces/${encodeURIComponent(this.namespace)}/pods`,
        query,
        onEvent,
        onDone,
      );
    } catch (err) {
      this.#retryLater(err, 'watch');
    }
  }

  #rememberDeleted(pod: V1Pod): void {
    const uid = pod.metadata?.uid;
    if (!uid) return;
    if (this.#deleted.size >= 1024) this.#deleted.delete(this.#deleted.values().next().value!);
    this.#deleted.add(uid);
  }

  #nextBackoff(): number {
    const ms = this.#backoffMs;
    this.#backoffMs = Math.min(MAX_BACKOFF_MS, this.#backoffMs * 2);
    return ms / 2 + Math.random() * (ms / 2);
  }

  #retryLater(err: unknown, what: 'list' | 'watch'): void {
    if (this.#closed) return;
    const delay = this.#nextBackoff();
    this.#o.logger.warn(
      { namespace: this.namespace, err: (err as Error).message?.split('\n')[0], retryInMs: Math.round(delay) },
      `pod ${what} failed`,
    );
    this.#timer = setTimeout(
      () => void (what === 'list' || this.#resourceVersion === null ? this.#relist() : this.#watch()),
      delay,
    );
    this.#timer.unref();
  }
}
