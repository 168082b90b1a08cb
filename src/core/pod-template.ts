/**
 * A partial Pod added to task pods: server-wide (`--pod-template FILE`) and per task (a DAG's
 * `kubernetes.pod_template`). Only the fields a platform team needs are taken, each checked with a
 * clear error (at startup, or at apply), so a typo does not silently drop a setting:
 * metadata.labels and metadata.annotations (never Leoflow's own keys), and spec.affinity,
 * priorityClassName, imagePullSecrets, volumes, securityContext (replaces the restricted default),
 * and the `task` container's volumeMounts and securityContext (replaces its default).
 */
import type {
  V1Affinity,
  V1LocalObjectReference,
  V1Pod,
  V1PodSecurityContext,
  V1SecurityContext,
  V1Volume,
  V1VolumeMount,
} from '@kubernetes/client-node';
import { labelValueProblem } from './kubernetes-names.js';

export interface PodTemplate {
  labels: Record<string, string>;
  annotations: Record<string, string>;
  affinity?: V1Affinity;
  priorityClassName?: string;
  imagePullSecrets?: V1LocalObjectReference[];
  volumes?: V1Volume[];
  securityContext?: V1PodSecurityContext;
  container: { volumeMounts?: V1VolumeMount[]; securityContext?: V1SecurityContext };
}

/** Label and annotation keys Leoflow sets itself: a template may not change them. */
const OWN_KEY = /^(leoflow\.io\/|app\.kubernetes\.io\/managed-by$)/;

type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);

function only(o: Obj, where: string, allowed: string[]): void {
  for (const k of Object.keys(o)) {
    if (!allowed.includes(k))
      throw new Error(`${where}.${k} is not taken from a pod template (allowed: ${allowed.join(', ')})`);
  }
}

function stringMap(v: unknown, where: string, labels: boolean): Record<string, string> {
  if (v === undefined) return {};
  if (!isObj(v)) throw new Error(`${where} must be a map of strings`);
  const out: Record<string, string> = {};
  for (const [k, x] of Object.entries(v)) {
    if (typeof x !== 'string') throw new Error(`${where}.${k} must be a string, got ${JSON.stringify(x)}`);
    if (OWN_KEY.test(k)) throw new Error(`${where}.${k}: Leoflow sets this key itself`);
    if (labels) {
      const why = labelValueProblem(x);
      if (why) throw new Error(`${where}.${k}: ${why}`);
    }
    out[k] = x;
  }
  return out;
}

function listOf<T>(v: unknown, where: string, check: (x: Obj, at: string) => void): T[] | undefined {
  if (v === undefined) return undefined;
  if (!Array.isArray(v)) throw new Error(`${where} must be a list`);
  v.forEach((x, i) => {
    if (!isObj(x)) throw new Error(`${where}[${i}] must be an object`);
    check(x, `${where}[${i}]`);
  });
  return v as T[];
}

const named = (x: Obj, at: string) => {
  if (typeof x.name !== 'string' || x.name === '') throw new Error(`${at}.name must be a non-empty string`);
};

function objectAt<T>(v: unknown, where: string): T | undefined {
  if (v === undefined) return undefined;
  if (!isObj(v)) throw new Error(`${where} must be an object`);
  return v as T;
}

/** The partial Pod `doc` as a template, checked; throws with the field at fault. */
export function checkPodTemplate(doc: unknown): PodTemplate {
  if (!isObj(doc)) throw new Error('must be a partial Pod (an object with metadata and/or spec)');
  only(doc, 'pod', ['apiVersion', 'kind', 'metadata', 'spec']);
  if (doc.kind !== undefined && doc.kind !== 'Pod')
    throw new Error(`kind must be Pod, got ${JSON.stringify(doc.kind)}`);
  const metadata = objectAt<Obj>(doc.metadata, 'metadata') ?? {};
  only(metadata, 'metadata', ['labels', 'annotations']);
  const spec = objectAt<Obj>(doc.spec, 'spec') ?? {};
  only(spec, 'spec', ['affinity', 'priorityClassName', 'imagePullSecrets', 'volumes', 'securityContext', 'containers']);
  if (
    spec.priorityClassName !== undefined &&
    (typeof spec.priorityClassName !== 'string' || spec.priorityClassName === '')
  ) {
    throw new Error('spec.priorityClassName must be a non-empty string');
  }
  const containers =
    listOf<Obj>(spec.containers, 'spec.containers', (c, at) => {
      if (c.name !== 'task')
        throw new Error(`${at}.name must be "task" (the one container of a task pod), got ${JSON.stringify(c.name)}`);
      only(c, at, ['name', 'volumeMounts', 'securityContext']);
    }) ?? [];
  if (containers.length > 1) throw new Error('spec.containers may list the "task" container once');
  const c = containers[0] ?? {};
  const volumes = listOf<V1Volume>(spec.volumes, 'spec.volumes', (v, at) => {
    named(v, at);
    if (String(v.name).startsWith('leoflow-'))
      throw new Error(`${at}.name: names starting with "leoflow-" are Leoflow's own`);
  });
  const mounts = listOf<V1VolumeMount>(c.volumeMounts, 'spec.containers[0].volumeMounts', (m, at) => {
    named(m, at);
    if (typeof m.mountPath !== 'string' || !m.mountPath.startsWith('/'))
      throw new Error(`${at}.mountPath must be an absolute path`);
    if (!(volumes ?? []).some((v) => v.name === m.name))
      throw new Error(`${at}: no volume "${String(m.name)}" in spec.volumes`);
  });
  const t: PodTemplate = {
    labels: stringMap(metadata.labels, 'metadata.labels', true),
    annotations: stringMap(metadata.annotations, 'metadata.annotations', false),
    container: {},
  };
  const affinity = objectAt<V1Affinity>(spec.affinity, 'spec.affinity');
  if (affinity) t.affinity = affinity;
  if (typeof spec.priorityClassName === 'string') t.priorityClassName = spec.priorityClassName;
  const pullSecrets = listOf<V1LocalObjectReference>(spec.imagePullSecrets, 'spec.imagePullSecrets', named);
  if (pullSecrets) t.imagePullSecrets = pullSecrets;
  if (volumes) t.volumes = volumes;
  const podSc = objectAt<V1PodSecurityContext>(spec.securityContext, 'spec.securityContext');
  if (podSc) t.securityContext = podSc;
  if (mounts) t.container.volumeMounts = mounts;
  const sc = objectAt<V1SecurityContext>(c.securityContext, 'spec.containers[0].securityContext');
  if (sc) t.container.securityContext = sc;
  return t;
}

/**
 * A task's template over the server's: its labels and annotations win key by key, its volumes
 * replace the server's of the same name, and each other field it gives replaces the server's.
 */
export function mergePodTemplates(server: PodTemplate | null, task: PodTemplate | undefined): PodTemplate | null {
  if (!task) return server;
  if (!server) return task;
  const taskVolumes = new Set((task.volumes ?? []).map((v) => v.name));
  const volumes = [...(server.volumes ?? []).filter((v) => !taskVolumes.has(v.name)), ...(task.volumes ?? [])];
  const taskPaths = new Set((task.container.volumeMounts ?? []).map((m) => m.mountPath));
  const mounts = [
    ...(server.container.volumeMounts ?? []).filter((m) => !taskPaths.has(m.mountPath) && !taskVolumes.has(m.name)),
    ...(task.container.volumeMounts ?? []),
  ];
  const container = { ...server.container, ...task.container };
  if (mounts.length > 0) container.volumeMounts = mounts;
  return {
    ...server,
    ...task,
    labels: { ...server.labels, ...task.labels },
    annotations: { ...server.annotations, ...task.annotations },
    ...(volumes.length > 0 ? { volumes } : {}),
    container,
  };
}
