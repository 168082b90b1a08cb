import type { KubeObject, Resource } from './object-store.js';

/**
 * Server-side printing (`Accept: application/json;as=Table;g=meta.k8s.io;v=v1`), which kubectl
 * asks for: the columns the real printers give pods and events, so `kubectl get` against the fake
 * reads as against a cluster.
 */
interface Column {
  name: string;
  type: string;
  format: string;
  description: string;
  priority: number;
}

function col(name: string, priority = 0, format = '', type = 'string'): Column {
  return { name, type, format, description: name, priority };
}

const COLUMNS: Record<Resource, Column[]> = {
  pods: [
    col('Name', 0, 'name'),
    col('Ready'),
    col('Status'),
    col('Restarts', 0, '', 'string'),
    col('Age'),
    col('IP', 1),
    col('Node', 1),
    col('Nominated Node', 1),
    col('Readiness Gates', 1),
  ],
  events: [col('Last Seen'), col('Type'), col('Reason'), col('Object'), col('Message')],
};

/** kubectl asks for a Table first and a plain list as its fallback. */
export function wantsTable(accept: string | undefined): boolean {
  return (accept ?? '').split(',').some((part) => part.includes('as=Table') && part.includes('g=meta.k8s.io'));
}

export function humanAge(since: string | undefined, nowMs = Date.now()): string {
  if (!since) return '<unknown>';
  const s = Math.max(0, Math.floor((nowMs - Date.parse(since)) / 1000));
  if (s < 120) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 10) return `${m}m${s % 60 ? `${s % 60}s` : ''}`;
  if (m < 180) return `${m}m`;
  const h = Math.floor(m / 60);
  if (h < 48) return `${h}h`;
  return `${Math.floor(h / 24)}d`;
}

/** The STATUS column: the pod's reason, a container's waiting or terminated reason, Terminating, or the phase. */
function podStatus(p: KubeObject): string {
  let reason: string = p.status?.reason ?? p.status?.phase ?? 'Pending';
  for (const cs of p.status?.containerStatuses ?? []) {
    if (cs.state?.waiting?.reason) reason = cs.state.waiting.reason;
    else if (cs.state?.terminated?.reason) reason = cs.state.terminated.reason;
  }
  if (p.metadata.deletionTimestamp && p.status?.reason !== 'NodeLost') return 'Terminating';
  return reason;
}

function cells(resource: Resource, o: KubeObject): unknown[] {
  if (resource === 'pods') {
    const statuses: any[] = o.status?.containerStatuses ?? [];
    const ready = statuses.filter((c) => c.ready).length;
    const restarts = statuses.reduce((n, c) => n + (c.restartCount ?? 0), 0);
    return [
      o.metadata.name,
      `${ready}/${o.spec?.containers?.length ?? 0}`,
      podStatus(o),
      String(restarts),
      humanAge(o.metadata.creationTimestamp),
      o.status?.podIP ?? '<none>',
      o.spec?.nodeName ?? '<none>',
      '<none>',
      '<none>',
    ];
  }
  const obj = o.involvedObject ?? {};
  return [
    humanAge(o.lastTimestamp),
    o.type,
    o.reason,
    `${String(obj.kind ?? '').toLowerCase()}/${obj.name}`,
    o.message,
  ];
}

export function toTable(resource: Resource, items: KubeObject[], resourceVersion: string): unknown {
  return {
    kind: 'Table',
    apiVersion: 'meta.k8s.io/v1',
    metadata: { resourceVersion },
    columnDefinitions: COLUMNS[resource],
    rows: items.map((o) => ({
      cells: cells(resource, o),
      object: { kind: 'PartialObjectMetadata', apiVersion: 'meta.k8s.io/v1', metadata: o.metadata },
    })),
  };
}
