/**
 * A task's `map:` block: `over` names an upstream and the path to a JSON list in its output;
 * `max_parallel` caps how many of the task's mapped instances run at once. The upstream is checked
 * against `depends_on` by the task's reader.
 */
import type { DagIssue } from '../dag-spec.js';
import { MAX_MAP_PARALLEL, type MapSpec } from '../map-spec.js';
import { isMapping, readInteger, readString } from './field-readers.js';
import { expected, keyPath, missing, unknownKey } from './issue-messages.js';

const MAP_KEYS = ['over', 'max_parallel'] as const;

/** The `over` as written (the upstream is split off by the caller, which knows `depends_on`). */
export interface MapDraft {
  over: string;
  overPath: string;
  maxParallel?: number;
}

export function readMap(value: unknown, path: string, issues: DagIssue[]): MapDraft | undefined {
  if (!isMapping(value)) {
    issues.push(expected('a mapping with over: upstream_task.path.to.list', value, path));
    return undefined;
  }
  let over: string | undefined;
  let maxParallel: number | undefined;
  for (const [key, v] of Object.entries(value)) {
    const p = keyPath(path, key);
    if (key === 'over') {
      over = readString(v, p, issues, { nonEmpty: true, noNul: true });
      if (over !== undefined && over.split('.').some((part) => part === '')) {
        issues.push(expected('upstream_task or upstream_task.path.to.list', over, p));
        over = undefined;
      }
    } else if (key === 'max_parallel') maxParallel = readInteger(v, p, 1, MAX_MAP_PARALLEL, issues);
    else issues.push(unknownKey(key, p, MAP_KEYS));
  }
  if (!Object.hasOwn(value, 'over')) issues.push(missing('over', `${path}.over`));
  if (over === undefined) return undefined;
  return { over, overPath: keyPath(path, 'over'), ...(maxParallel !== undefined ? { maxParallel } : {}) };
}

/** The spec of a map whose upstream is known. */
export function mapSpecOf(draft: MapDraft, upstream: string, path: string[]): MapSpec {
  return { upstream, path, ...(draft.maxParallel !== undefined ? { maxParallel: draft.maxParallel } : {}) };
}
