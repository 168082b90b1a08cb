import type { ServerResponse } from 'node:http';
import type { FieldSelector } from './field-selector.js';
import type { LabelSelector } from './label-selector.js';
import { kindOf, type Change, type KubeObject, type ObjectStore, type Resource } from './object-store.js';
import { badRequest, expired, tooLargeResourceVersion, type Status } from './status.js';

/**
 * One watch, as the API server's watch cache serves it: newline-delimited JSON events
 * `{"type":…,"object":…}` on a 200 response, replayed from the requested resourceVersion, filtered
 * by selectors (an object that stops matching is sent as DELETED, one that starts as ADDED), with
 * periodic BOOKMARKs, and an ERROR event carrying a 410 Expired Status when the requested version
 * was compacted away, after which the server ends the stream.
 */
export interface WatchRequest {
  resource: Resource;
  namespace?: string;
  labels: LabelSelector;
  fields: FieldSelector;
  /** The `resourceVersion` parameter as sent ('' when absent). */
  resourceVersion: string;
  allowBookmarks: boolean;
  sendInitialEvents: boolean;
  timeoutSeconds?: number;
  bookmarkIntervalMs: number;
  /** Changes (and bookmarks) reach the stream this late, in order: a watch cache behind the store. */
  lagMs?: number;
  labelSelector?: string;
  fieldSelector?: string;
}

/** What tests see of an open watch. */
export interface OpenWatch {
  resource: Resource;
  namespace?: string;
  labelSelector?: string;
  fieldSelector?: string;
  resourceVersion: string;
  openedAt: number;
}

/** How long the server waits for a requested resourceVersion newer than its own (the cacher's 3 s). */
const TOO_LARGE_WAIT_MS = 3000;

export class WatchStream {
  readonly info: OpenWatch;
  private unsubscribe: (() => void) | undefined;
  private readonly timers: NodeJS.Timeout[] = [];
  private ended = false;

  constructor(
    private readonly store: ObjectStore,
    private readonly req: WatchRequest,
    private readonly res: ServerResponse,
    private readonly onEnd: (w: WatchStream) => void,
  ) {
    const info: OpenWatch = { resource: req.resource, resourceVersion: req.resourceVersion, openedAt: Date.now() };
    if (req.namespace !== undefined) info.namespace = req.namespace;
    if (req.labelSelector) info.labelSelector = req.labelSelector;
    if (req.fieldSelector) info.fieldSelector = req.fieldSelector;
    this.info = info;
    res.on('close', () => this.end());
  }

  /**
   * Sends the response head, then the replayed events. Past authentication and a well-formed
   * resourceVersion, the real server reports every failure as an ERROR event on a 200 stream (the
   * cacher's errWatcher): a version older than its window is 410 Expired, one newer than its own
   * that does not arrive within 3 s is 504 Timeout.
   */
  async start(): Promise<void> {
    const requested = this.req.resourceVersion;
    const fromCurrentState = requested === '' || requested === '0' || this.req.sendInitialEvents;
    if (!fromCurrentState && !/^\d+$/.test(requested))
      throw badRequest(`invalid resource version: ${JSON.stringify(requested)}`);
    const rv = fromCurrentState ? 0 : Number(requested);
    const failure = !fromCurrentState && rv > this.store.resourceVersion ? await this.waitFor(rv) : undefined;
    if (this.ended) return;
    this.res.writeHead(200, {
      'Content-Type': 'application/json',
      'Transfer-Encoding': 'chunked',
      'Cache-Control': 'no-cache, private',
    });
    this.res.flushHeaders();
    if (failure) {
      this.sendError(failure);
      this.close();
      return;
    }
    let replay: Change[] | undefined = [];
    let initial: KubeObject[] = [];
    if (fromCurrentState) initial = this.store.list(this.req.resource, this.req.namespace, (o) => this.matches(o));
    else replay = this.store.since(this.req.resource, rv);
    if (replay === undefined) {
      // The cacher's message for a version older than its window; the stream ends after it.
      this.sendError(
        expired(`too old resource version: ${rv} (${this.store.oldestWatchable(this.req.resource)})`).status,
      );
      this.close();
      return;
    }
    for (const o of initial) this.send('ADDED', o);
    if (this.req.sendInitialEvents && this.req.allowBookmarks) {
      this.send('BOOKMARK', this.bookmark({ 'k8s.io/initial-events-end': 'true' }));
    }
    for (const c of replay) this.deliver(c);
    this.unsubscribe = this.store.subscribe((c) => this.later(() => this.deliver(c)));
    if (this.req.allowBookmarks && this.req.bookmarkIntervalMs > 0) {
      this.timers.push(
        setInterval(() => {
          const b = this.bookmark();
          this.later(() => this.send('BOOKMARK', b));
        }, this.req.bookmarkIntervalMs),
      );
    }
    if (this.req.timeoutSeconds !== undefined && this.req.timeoutSeconds > 0) {
      this.timers.push(setTimeout(() => this.close(), this.req.timeoutSeconds * 1000));
    }
  }

  /** Ends the stream from the server's side, as an API server restart or its watch timeout does. */
  close(): void {
    if (!this.res.writableEnded) this.res.end();
    this.end();
  }

  /** Drops the connection under the stream without ending it. */
  reset(): void {
    this.res.socket?.destroy();
    this.end();
  }

  /**
   * The connection goes silent without closing, as a half-open TCP connection does (a NAT or
   * load balancer that dropped its state, a peer that vanished): nothing more is sent, not even
   * the end at timeoutSeconds, and the socket stays open; only the client can notice.
   */
  blackHole(): void {
    this.end();
  }

  /** The etcd compaction error an established watch gets (etcd3 watcher's interpretWatchError), then the end. */
  expire(): void {
    this.sendError(expired('The resourceVersion for the provided watch is too old.').status);
    this.close();
  }

  /** Undefined once the store reaches `rv`, or the Status of the timeout. */
  private async waitFor(rv: number): Promise<Status | undefined> {
    const deadline = Date.now() + TOO_LARGE_WAIT_MS;
    while (this.store.resourceVersion < rv) {
      if (Date.now() > deadline) return tooLargeResourceVersion(rv, this.store.resourceVersion).status;
      if (this.ended) return undefined;
      await new Promise((r) => setTimeout(r, 25));
    }
    return undefined;
  }

  private matches(o: KubeObject): boolean {
    if (this.req.namespace !== undefined && o.metadata.namespace !== this.req.namespace) return false;
    return this.req.labels(o.metadata.labels) && this.req.fields(o);
  }

  /** Now, or `lagMs` later (equal delays keep the order). */
  private later(f: () => void): void {
    const lag = this.req.lagMs ?? 0;
    if (lag <= 0) return f();
    const t = setTimeout(() => {
      this.timers.splice(this.timers.indexOf(t), 1);
      f();
    }, lag);
    this.timers.push(t);
  }

  private deliver(c: Change): void {
    if (c.resource !== this.req.resource) return;
    if (this.req.namespace !== undefined && c.namespace !== this.req.namespace) return;
    const now = this.matches(c.object);
    if (c.type === 'MODIFIED') {
      const before = c.old !== undefined && this.matches(c.old);
      if (before && now) this.send('MODIFIED', c.object);
      else if (!before && now) this.send('ADDED', c.object);
      else if (before && !now) this.send('DELETED', c.object);
      return;
    }
    if (now) this.send(c.type, c.object);
  }

  private bookmark(annotations?: Record<string, string>): KubeObject {
    const metadata: KubeObject['metadata'] = {
      resourceVersion: String(this.store.resourceVersion),
      creationTimestamp: null,
    } as any;
    if (annotations) metadata.annotations = annotations;
    return { kind: kindOf(this.req.resource), apiVersion: 'v1', metadata } as KubeObject;
  }

  private send(type: string, object: unknown): void {
    if (this.ended || this.res.writableEnded) return;
    this.res.write(`${JSON.stringify({ type, object })}\n`);
  }

  private sendError(status: Status): void {
    this.send('ERROR', status);
  }

  private end(): void {
    if (this.ended) return;
    this.ended = true;
    this.unsubscribe?.();
    for (const t of this.timers) clearTimeout(t);
    this.onEnd(this);
  }
}
