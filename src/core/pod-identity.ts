/**
 * The name and labels of an attempt's pod. The name is a pure function of the attempt (dag, run,
 * task, try and its token), so two leaders (or a retried dispatch) name the same pod and the API
 * server's AlreadyExists collapses the duplicate; a hash of them, joined unambiguously, keeps
 * `a-1`+`x` and `a`+`1-x` apart, and the readable part is only a hint for humans. The token makes
 * it one attempt's alone: ids start again after a database is reset, and a pod left by the old
 * one must never answer a create (AlreadyExists) or an adoption for a new attempt. Only a hash of
 * the token is in the name: the token is the pod agent's credential.
 */
import { createHash } from 'node:crypto';
import { labelValueProblem } from './kubernetes-names.js';

export const LABEL = {
  managedBy: 'app.kubernetes.io/managed-by',
  dag: 'leoflow.io/dag',
  run: 'leoflow.io/run-id',
  task: 'leoflow.io/task',
  ti: 'leoflow.io/ti-id',
  try: 'leoflow.io/try',
} as const;
export const MANAGED_BY = 'leoflow';
/** The selector of every pod this control plane creates. */
export const POD_SELECTOR = `${LABEL.managedBy}=${MANAGED_BY}`;
/** The ids as given (label values may be shortened; annotations hold them whole). */
export const ANNOTATION = { dag: 'leoflow.io/dag-id', task: 'leoflow.io/task-id' } as const;

export interface PodIdentity {
  dagId: string;
  runId: string;
  taskId: string;
  tiId: string;
  tryNumber: number;
  attemptToken: string;
}

const hash = (parts: unknown[], hexChars: number) =>
  createHash('sha256').update(JSON.stringify(parts)).digest('hex').slice(0, hexChars);

/** `lf-<dag>-<task>-<hash>`: a DNS-1123 label of at most 63 characters, one per attempt. */
export function podName(p: PodIdentity): string {
  const slug = `${p.dagId}-${p.taskId}`
    .toLowerCase()
    .replace(/[^a-z0-9-]+/g, '-')
    .replace(/-+/g, '-')
    .slice(0, 40)
    .replace(/^-+|-+$/g, '');
  return `lf-${slug === '' ? '' : `${slug}-`}${hash([p.dagId, p.runId, p.taskId, p.tryNumber, p.attemptToken], 12)}`;
}

/** A label value for `s`: itself when valid, else a cut of it with a hash of the whole. */
export function labelValue(s: string): string {
  if (labelValueProblem(s) === null) return s;
  const cut = s
    .replace(/[^A-Za-z0-9_.-]+/g, '-')
    .slice(0, 50)
    .replace(/^[^A-Za-z0-9]+|[^A-Za-z0-9]+$/g, '');
  return `${cut === '' ? 'x' : cut}-${hash([s], 10)}`;
}

export function podLabels(p: PodIdentity): Record<string, string> {
  return {
    [LABEL.managedBy]: MANAGED_BY,
    [LABEL.dag]: labelValue(p.dagId),
    [LABEL.run]: labelValue(p.runId),
    [LABEL.task]: labelValue(p.taskId),
    [LABEL.ti]: labelValue(p.tiId),
    [LABEL.try]: String(p.tryNumber),
  };
}

/** The (ti, try) a pod of ours is for, from its labels; null for a pod that is not one of ours. */
export function attemptOfPod(labels: Record<string, string> | undefined): { tiId: string; tryNumber: number } | null {
  if (!labels || labels[LABEL.managedBy] !== MANAGED_BY) return null;
  const tiId = labels[LABEL.ti];
  const tryNumber = Number(labels[LABEL.try]);
  if (!tiId || !/^\d+$/.test(tiId) || !Number.isInteger(tryNumber) || tryNumber < 1) return null;
  return { tiId, tryNumber };
}
