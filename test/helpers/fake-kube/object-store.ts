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
  private readonly objects = new Map<Resource, Map<string, KubeObject>>([['pods', new Map()], ['events', new Map()]]);
  private history: Change[] = [];
  private readonly listeners = new Set<(c: Change) => void>();

  constructor(startRv = 1000) {
    this.rv = startRv;
    this.compactedRv = startRv;
  }

  get resourceVersion(): number {
    return this.rv;
  }

  get compactedResourceVersion(): number {
    return this.compactedRv;
  }

  get(resource: Resource, namespace: string, name: string): KubeObject | undefined {
    const o = this.objects.get(resource)!.get(`${namespace}/${name}`);
    return o ? structuredClone(o) : undefined;
  }

  /** Sorted by namespace then name, as etcd returns keys. */
  list(resource: Resource, namespace?: string): KubeObject[] {
    const out: KubeObject[] = [];
    for (const [key, o] of this.objects.get(resource)!) if (namespace === undefined || key.startsWith(`${namespace}/`)) out.push(o);
    out.sort((a, b) => keyOf(a).localeCompare(keyOf(b)));
    return out.map((o) => structuredClone(o));
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

  /** Changes after `rv`, or undefined when some of them were compacted away. */
  since(rv: number): Change[] | undefined {
    if (rv < this.compactedRv) return undefined;
    return this.history.filter((c) => c.rv > rv);
  }

  compact(): void {
    this.compactedRv = this.rv;
    this.history = [];
  }

  subscribe(listener: (c: Change) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  private emit(change: Change): void {
    this.history.push(change);
    for (const l of [...this.listeners]) l(change);
  }
}

function keyOf(o: KubeObject): string {
  return `${o.metadata.namespace ?? ''}/${o.metadata.name}`;
}
