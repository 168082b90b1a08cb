/**
 * The fake's etcd: every object by resource and key, one global resourceVersion that every write
 * bumps, and the history of changes since the last compaction, which watches replay from a
 * resourceVersion. Objects are copied in and out, so no caller can change one behind a watch's back.
 */
export type Resource = 'pods' | 'events';
export type EventType = 'ADDED' | 'MODIFIED' | 'DELETED';

export interface KubeObject {
  kind?: string;
  apiVersion?: string;
  metadata: { name: string; namespace?: string; resourceVersion?: string; uid?: string; [k: string]: any };
  [k: string]: any;
}

export interface Change {
  rv: number;
  type: EventType;
  resource: Resource;
  namespace: string;
  /** The object before the change (for MODIFIED), to tell a watch with a selector when it stops matching. */
  old?: KubeObject;
  object: KubeObject;
}

const KINDS: Record<Resource, string> = { pods: 'Pod', events: 'Event' };

export function kindOf(resource: Resource): string {
  return KINDS[resource];
}

export class ObjectStore {
  private rv: number;
  /** resourceVersions at or below this are compacted away: watching from them is 410 Gone. */
  private compactedRv: number;
  private readonly objects = new Map<Resource, Map<string, KubeObject>>([
    ['pods', new Map()],
    ['events', new Map()],
  ]);
  /** Each resource's recent changes, oldest first: its watch cache window. */
  private readonly history = new Map<Resource, Change[]>([
    ['pods', []],
    ['events', []],
  ]);
  /** The resourceVersion just before each resource's window: watching from below it is 410 Gone. */
  private readonly windowStart = new Map<Resource, number>();
  private readonly listeners = new Set<(c: Change) => void>();

  /**
   * @param historyLimit how many changes of each resource a watch can be replayed from, as the
   * API server's watch cache keeps a window of them; older resourceVersions get 410 Expired.
   */
  constructor(
    startRv = 1000,
    private readonly historyLimit = 100_000,
  ) {
    this.rv = startRv;
    this.compactedRv = startRv;
  }

  get resourceVersion(): number {
    return this.rv;
  }

  /** The oldest resourceVersion a watch of `resource` can start from. */
  oldestWatchable(resource: Resource): number {
    return Math.max(this.compactedRv, this.windowStart.get(resource) ?? 0);
  }

  get compactedResourceVersion(): number {
    return this.compactedRv;
  }

  get(resource: Resource, namespace: string, name: string): KubeObject | undefined {
    const o = this.objects.get(resource)!.get(`${namespace}/${name}`);
    return o ? structuredClone(o) : undefined;
  }

  /** Copies, sorted by namespace then name, as etcd returns keys. */
  list(resource: Resource, namespace?: string, filter?: (o: KubeObject) => boolean): KubeObject[] {
    return this.scan(resource, namespace, filter).map((o) => structuredClone(o));
  }

  /** The stored objects themselves, for reads inside the fake that change nothing (no copies). */
  scan(resource: Resource, namespace?: string, filter?: (o: KubeObject) => boolean): readonly KubeObject[] {
    const out: KubeObject[] = [];
    for (const [key, o] of this.objects.get(resource)!) {
      if ((namespace === undefined || key.startsWith(`${namespace}/`)) && (filter === undefined || filter(o)))
        out.push(o);
    }
    return out.sort((a, b) => compareKeys(keyOf(a), keyOf(b)));
  }

  create(resource: Resource, object: KubeObject): KubeObject {
    const stored = structuredClone(object);
    stored.kind = kindOf(resource);
    stored.apiVersion = 'v1';
    stored.metadata.resourceVersion = String(++this.rv);
    this.objects.get(resource)!.set(keyOf(stored), stored);
    this.emit({ rv: this.rv, type: 'ADDED', resource, namespace: stored.metadata.namespace ?? '', object: stored });
    return structuredClone(stored);
  }

  /** Applies `mutate` to a copy and stores it as a new version; undefined when the object is gone. */
  update(resource: Resource, namespace: string, name: string, mutate: (o: KubeObject) => void): KubeObject | undefined {
    const map = this.objects.get(resource)!;
    const old = map.get(`${namespace}/${name}`);
    if (!old) return undefined;
    const next = structuredClone(old);
    mutate(next);
    next.metadata.resourceVersion = String(++this.rv);
    map.set(`${namespace}/${name}`, next);
    this.emit({ rv: this.rv, type: 'MODIFIED', resource, namespace, old, object: next });
    return structuredClone(next);
  }

  /** The DELETED event carries the object with the resourceVersion of its deletion, as the real server's does. */
  remove(resource: Resource, namespace: string, name: string): KubeObject | undefined {
    const map = this.objects.get(resource)!;
    const old = map.get(`${namespace}/${name}`);
    if (!old) return undefined;
    map.delete(`${namespace}/${name}`);
    const gone = structuredClone(old);
    gone.metadata.resourceVersion = String(++this.rv);
    this.emit({ rv: this.rv, type: 'DELETED', resource, namespace, object: gone });
    return structuredClone(gone);
  }

  /** Changes of `resource` after `rv`, or undefined when some of them are out of the window or compacted away. */
  since(resource: Resource, rv: number): Change[] | undefined {
    if (rv < this.oldestWatchable(resource)) return undefined;
    const h = this.history.get(resource)!;
    let lo = 0;
    let hi = h.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (h[mid]!.rv <= rv) lo = mid + 1;
      else hi = mid;
    }
    return h.slice(lo);
  }

  compact(): void {
    this.compactedRv = this.rv;
    for (const h of this.history.values()) h.length = 0;
  }

  subscribe(listener: (c: Change) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  private emit(change: Change): void {
    const h = this.history.get(change.resource)!;
    h.push(change);
    if (h.length > this.historyLimit) {
      const dropped = h.splice(0, h.length - this.historyLimit);
      this.windowStart.set(change.resource, dropped.at(-1)!.rv);
    }
    for (const l of [...this.listeners]) l(change);
  }
}

/** Byte order, as etcd sorts its keys. */
function compareKeys(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

function keyOf(o: KubeObject): string {
  return `${o.metadata.namespace ?? ''}/${o.metadata.name}`;
}
