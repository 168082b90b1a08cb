import { createHash } from 'node:crypto';
import type { TaskDefinition } from './dag-spec.js';

/**
 * The completion cache's key language, small on purpose: a key is a list of references, each
 * `conf` or `conf.a.b` (the run's conf) or `inputs.<upstream>` or `inputs.<upstream>.a.0` (that
 * upstream's output), a step being a key or a list index. No operators and no code: a key is read
 * at a glance, evaluates in what its paths are long, and can run nothing.
 */

/** A reference's root and the steps after it. */
export interface CacheRef {
  root: 'conf' | 'inputs';
  path: string[];
}

/** Why a reference is not one, or null when it is. */
export function cacheRefProblem(ref: string): string | null {
  const parts = ref.split('.');
  if (parts.some((p) => p === '')) return 'has an empty step';
  if (parts[0] === 'conf') return null;
  if (parts[0] === 'inputs') return parts.length >= 2 ? null : 'names no upstream: inputs.<upstream>[.path]';
  return 'starts with neither conf nor inputs';
}

export function parseCacheRef(ref: string): CacheRef {
  const [root, ...path] = ref.split('.');
  return { root: root === 'conf' ? 'conf' : 'inputs', path };
}

/** The value at `path` in `v` (object keys, list indexes), or null when a step is missing. */
function at(v: unknown, path: readonly string[]): unknown {
  for (const step of path) {
    if (Array.isArray(v) && /^\d+$/.test(step) && Number(step) < v.length) v = v[Number(step)];
    else if (typeof v === 'object' && v !== null && !Array.isArray(v) && Object.hasOwn(v, step))
      v = (v as Record<string, unknown>)[step];
    else return null;
  }
  return v;
}

/**
 * The key's hash: sha256 of the JSON list of the referenced values (a missing one is null), so two
 * attempts share an entry exactly when every referenced value is equal.
 */
export function cacheKeyHash(key: readonly string[], conf: unknown, inputs: unknown): string {
  const values = key.map((ref) => {
    const r = parseCacheRef(ref);
    return at(r.root === 'conf' ? conf : inputs, r.path);
  });
  return createHash('sha256').update(JSON.stringify(values)).digest('hex');
}

/**
 * A task's spec version for the cache: a hash of its spec, so changing what the task runs (its
 * command, env, image, key, …) stops it reusing results of the old definition, while a change to
 * another task of the DAG does not.
 */
export function taskSpecHash(task: TaskDefinition): string {
  return createHash('sha256').update(JSON.stringify(task)).digest('hex').slice(0, 32);
}
