import type { KubeObject } from './object-store.js';
import { parseQuantity } from './quantity.js';

/**
 * ResourceQuota admission for pods: the namespace's non-terminal pods count against each quota's
 * `hard` limits; a create that would pass one is refused with the real message shape
 * (`exceeded quota: NAME, requested: …, used: …, limited: …`), and a quota on requests or limits
 * refuses a pod whose containers do not state them (`failed quota: NAME: must specify …`).
 */
export interface Quota {
  name: string;
  hard: Record<string, string>;
}

const TRACKED = ['pods', 'requests.cpu', 'requests.memory', 'limits.cpu', 'limits.memory', 'cpu', 'memory'] as const;

function usageOf(pod: KubeObject): Record<string, number> {
  const sum = (kind: 'requests' | 'limits', r: string) =>
    (pod.spec?.containers ?? []).reduce(
      (acc: number, c: any) => acc + (parseQuantity(c.resources?.[kind]?.[r]) ?? 0),
      0,
    );
  return {
    pods: 1,
    'requests.cpu': sum('requests', 'cpu'),
    'requests.memory': sum('requests', 'memory'),
    'limits.cpu': sum('limits', 'cpu'),
    'limits.memory': sum('limits', 'memory'),
    cpu: sum('requests', 'cpu'),
    memory: sum('requests', 'memory'),
  };
}

function format(resource: string, value: number): string {
  if (resource === 'pods') return String(value);
  if (resource.endsWith('cpu')) return Number.isInteger(value) ? String(value) : `${Math.round(value * 1000)}m`;
  for (const [suffix, f] of [
    ['Gi', 2 ** 30],
    ['Mi', 2 ** 20],
    ['Ki', 2 ** 10],
  ] as const) {
    if (value >= f && value % f === 0) return `${value / f}${suffix}`;
  }
  return String(value);
}

function list(entries: Array<[string, number]>): string {
  return entries
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([k, v]) => `${k}=${format(k, v)}`)
    .join(',');
}

/** The reason a create is refused (after `pods "x" is forbidden: `), or undefined when every quota admits it. */
export function checkQuotas(quotas: Quota[], pod: KubeObject, existing: readonly KubeObject[]): string | undefined {
  const want = usageOf(pod);
  for (const q of quotas) {
    const missing: string[] = [];
    for (const r of Object.keys(q.hard)) {
      if (!/^(requests|limits)\.(cpu|memory)$/.test(r)) continue;
      const [kind, res] = r.split('.') as ['requests' | 'limits', string];
      const without = (pod.spec?.containers ?? [])
        .filter((c: any) => c.resources?.[kind]?.[res] === undefined)
        .map((c: any) => c.name);
      if (without.length > 0) missing.push(`${r} for: ${without.join(',')}`);
    }
    if (missing.length > 0) return `failed quota: ${q.name}: must specify ${missing.join('; ')}`;
    const used: Record<string, number> = {};
    for (const p of existing) for (const [k, v] of Object.entries(usageOf(p))) used[k] = (used[k] ?? 0) + v;
    const over: string[] = [];
    for (const [r, hardText] of Object.entries(q.hard)) {
      if (!(TRACKED as readonly string[]).includes(r)) continue;
      const hard = parseQuantity(hardText) ?? 0;
      if ((used[r] ?? 0) + (want[r] ?? 0) > hard + 1e-9) over.push(r);
    }
    if (over.length > 0) {
      const pick = (m: Record<string, number>) => over.map((r) => [r, m[r] ?? 0] as [string, number]);
      const limited = over.map((r) => [r, parseQuantity(q.hard[r]) ?? 0] as [string, number]);
      return `exceeded quota: ${q.name}, requested: ${list(pick(want))}, used: ${list(pick(used))}, limited: ${list(limited)}`;
    }
  }
  return undefined;
}
