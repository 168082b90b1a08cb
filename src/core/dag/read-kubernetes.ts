/**
 * A task's `kubernetes:` block: image, resources, namespace, service account, node selector,
 * tolerations and a pod template of its pods, checked by the API server's own rules so that a
 * mistake is refused at apply, with the field's path. Only the keys given are kept (absent fields
 * stay absent).
 */
import type { DagIssue, KubernetesSpec, TolerationSpec } from '../dag-spec.js';
import {
  dns1123LabelProblem,
  dns1123SubdomainProblem,
  labelKeyProblem,
  labelValueProblem,
  parseQuantity,
} from '../kubernetes-names.js';
import { checkPodTemplate } from '../pod-template.js';
import { isMapping, MAX_INT4, readEnum, readInteger, readString } from './field-readers.js';
import { describe, expected, keyPath, unknownKey } from './issue-messages.js';
import { readMappingList } from './read-mapping-list.js';

const KUBERNETES_KEYS = [
  'image',
  'resources',
  'namespace',
  'service_account',
  'node_selector',
  'tolerations',
  'pod_template',
] as const;
const RESOURCES_KEYS = ['requests', 'limits'] as const;
const TOLERATION_KEYS = ['key', 'operator', 'value', 'effect', 'toleration_seconds'] as const;
const OPERATORS = ['Exists', 'Equal'] as const;
const EFFECTS = ['NoSchedule', 'PreferNoSchedule', 'NoExecute'] as const;
/** An image reference has no whitespace; the registry checks the rest (InvalidImageName). */
const IMAGE = /^[^\s]+$/;

export function readKubernetes(value: unknown, path: string, issues: DagIssue[]): KubernetesSpec | undefined {
  if (!isMapping(value)) {
    issues.push(
      expected(
        'a kubernetes mapping (image, resources, namespace, service_account, node_selector, tolerations, pod_template)',
        value,
        path,
      ),
    );
    return undefined;
  }
  const before = issues.length;
  const spec: KubernetesSpec = {};
  for (const [key, v] of Object.entries(value)) {
    const p = keyPath(path, key);
    switch (key) {
      case 'image': {
        const s = readString(v, p, issues, { nonEmpty: true });
        if (s !== undefined && !IMAGE.test(s))
          issues.push({ path: p, message: `must be an image reference without spaces, got ${describe(s)}` });
        else if (s !== undefined) spec.image = s;
        break;
      }
      case 'resources': {
        const r = readResources(v, p, issues);
        if (r) spec.resources = r;
        break;
      }
      case 'namespace': {
        const s = readNamed(v, p, issues, dns1123LabelProblem);
        if (s !== undefined) spec.namespace = s;
        break;
      }
      case 'service_account': {
        const s = readNamed(v, p, issues, dns1123SubdomainProblem);
        if (s !== undefined) spec.serviceAccount = s;
        break;
      }
      case 'node_selector': {
        const m = readLabels(v, p, issues);
        if (m) spec.nodeSelector = m;
        break;
      }
      case 'tolerations': {
        const t = readTolerations(v, p, issues);
        if (t) spec.tolerations = t;
        break;
      }
      case 'pod_template': {
        try {
          spec.podTemplate = checkPodTemplate(v);
        } catch (err) {
          issues.push({ path: p, message: (err as Error).message });
        }
        break;
      }
      default:
        issues.push(unknownKey(key, p, KUBERNETES_KEYS));
    }
  }
  return issues.length > before ? undefined : spec;
}

function readNamed(
  v: unknown,
  path: string,
  issues: DagIssue[],
  problem: (s: string) => string | null,
): string | undefined {
  const s = readString(v, path, issues, { nonEmpty: true });
  if (s === undefined) return undefined;
  const why = problem(s);
  if (why) {
    issues.push({ path, message: `${why}, got ${describe(s)}` });
    return undefined;
  }
  return s;
}

function readResources(v: unknown, path: string, issues: DagIssue[]): KubernetesSpec['resources'] | undefined {
  if (!isMapping(v)) {
    issues.push(expected('a mapping with requests and/or limits', v, path));
    return undefined;
  }
  const out: NonNullable<KubernetesSpec['resources']> = {};
  for (const [key, m] of Object.entries(v)) {
    const p = keyPath(path, key);
    if (key !== 'requests' && key !== 'limits') {
      issues.push(unknownKey(key, p, RESOURCES_KEYS));
      continue;
    }
    const q = readQuantities(m, p, issues);
    if (q) out[key] = q;
  }
  // The API server refuses a request above its limit (422): say so here, with the path.
  for (const [name, req] of Object.entries(out.requests ?? {})) {
    const lim = out.limits?.[name];
    if (lim !== undefined && parseQuantity(req)! > parseQuantity(lim)!) {
      issues.push({
        path: keyPath(keyPath(path, 'requests'), name),
        message: `request ${req} is above its limit ${lim}`,
      });
    }
  }
  return out;
}

function readQuantities(v: unknown, path: string, issues: DagIssue[]): Record<string, string> | undefined {
  if (!isMapping(v)) {
    issues.push(expected('a mapping of resource names (cpu, memory, …) to quantities', v, path));
    return undefined;
  }
  const out: Record<string, string> = {};
  for (const [name, q] of Object.entries(v)) {
    const p = keyPath(path, name);
    const nameProblem = labelKeyProblem(name);
    if (nameProblem) {
      issues.push({ path: p, message: `invalid resource name "${name}": ${nameProblem}` });
      continue;
    }
    // YAML reads `cpu: 2` as a number: a quantity all the same.
    const s = typeof q === 'number' && Number.isFinite(q) && q >= 0 ? String(q) : q;
    if (typeof s !== 'string' || parseQuantity(s) === null) {
      issues.push({
        path: p,
        message: `expected a resource quantity such as 500m, 2, 512Mi or 4Gi, got ${describe(q)}`,
      });
      continue;
    }
    out[name] = s;
  }
  return out;
}

function readLabels(v: unknown, path: string, issues: DagIssue[]): Record<string, string> | undefined {
  if (!isMapping(v)) {
    issues.push(expected('a mapping of node label keys to values', v, path));
    return undefined;
  }
  const before = issues.length;
  const entries: [string, string][] = [];
  for (const [key, val] of Object.entries(v)) {
    const p = keyPath(path, key);
    const kp = labelKeyProblem(key);
    if (kp) issues.push({ path: p, message: `invalid label key "${key}": ${kp}` });
    const s = readString(val, p, issues, { quoteHint: true });
    if (s === undefined) continue;
    const vp = labelValueProblem(s);
    if (vp) issues.push({ path: p, message: `invalid label value ${describe(s)}: ${vp}` });
    else entries.push([key, s]);
  }
  return issues.length > before ? undefined : Object.fromEntries(entries);
}

function readTolerations(v: unknown, path: string, issues: DagIssue[]): TolerationSpec[] | undefined {
  const o = {
    list: 'a list of tolerations',
    item: 'a toleration mapping (key, operator, value, effect, toleration_seconds)',
  };
  return readMappingList(v, path, issues, o, (item, p) => {
    const t: TolerationSpec = {};
    for (const [key, val] of Object.entries(item)) {
      const kp = keyPath(p, key);
      switch (key) {
        case 'key': {
          const s = readString(val, kp, issues, { nonEmpty: true });
          const why = s === undefined ? null : labelKeyProblem(s);
          if (why) issues.push({ path: kp, message: `invalid taint key "${s}": ${why}` });
          else if (s !== undefined) t.key = s;
          break;
        }
        case 'operator': {
          const o = readEnum(val, kp, OPERATORS, issues);
          if (o) t.operator = o;
          break;
        }
        case 'value': {
          const s = readString(val, kp, issues, { quoteHint: true });
          const why = s === undefined ? null : labelValueProblem(s);
          if (why) issues.push({ path: kp, message: `invalid taint value ${describe(s)}: ${why}` });
          else if (s !== undefined) t.value = s;
          break;
        }
        case 'effect': {
          const e = readEnum(val, kp, EFFECTS, issues);
          if (e) t.effect = e;
          break;
        }
        case 'toleration_seconds': {
          const n = readInteger(val, kp, 0, MAX_INT4, issues);
          if (n !== undefined) t.tolerationSeconds = n;
          break;
        }
        default:
          issues.push(unknownKey(key, kp, TOLERATION_KEYS));
      }
    }
    // The API server's own rules for a toleration (core/v1 validation).
    if (t.operator === 'Exists' && t.value !== undefined && t.value !== '')
      issues.push({ path: keyPath(p, 'value'), message: 'must be empty when operator is Exists' });
    if (t.key === undefined && t.operator !== 'Exists' && Object.hasOwn(item, 'operator'))
      issues.push({
        path: keyPath(p, 'operator'),
        message: 'must be Exists when key is empty (a toleration of every taint)',
      });
    if (t.tolerationSeconds !== undefined && t.effect !== 'NoExecute')
      issues.push({ path: keyPath(p, 'toleration_seconds'), message: 'is only allowed with effect NoExecute' });
    return t;
  });
}
