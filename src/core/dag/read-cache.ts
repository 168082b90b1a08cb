/**
 * A task's `cache:` block: `key` (a reference or a list of them, cache-key.ts) and `ttl` (how long
 * a success is reused, at most 365 days). Whether `inputs.<upstream>` names an upstream is checked
 * by the task's reader, which knows `depends_on`.
 */
import { cacheRefProblem } from '../cache-key.js';
import type { CacheSpec, DagIssue } from '../dag-spec.js';
import { formatDuration } from '../duration.js';
import { isMapping, readDuration, readStringList } from './field-readers.js';
import { expected, keyPath, missing, unknownKey } from './issue-messages.js';

const CACHE_KEYS = ['key', 'ttl'] as const;
/** The longest a cached success is reused. */
export const MAX_CACHE_TTL_MS = 365 * 86_400_000;

export function readCache(value: unknown, path: string, issues: DagIssue[]): CacheSpec | undefined {
  if (!isMapping(value)) {
    issues.push(expected('a mapping with key and ttl', value, path));
    return undefined;
  }
  const before = issues.length;
  let key: string[] | undefined;
  let ttlMs: number | undefined;
  for (const [k, v] of Object.entries(value)) {
    const p = keyPath(path, k);
    if (k === 'key') {
      key = readStringList(typeof v === 'string' ? [v] : v, p, issues, 'reference');
      for (const [i, ref] of (key ?? []).entries()) {
        const problem = cacheRefProblem(ref);
        if (problem) {
          issues.push({
            path: Array.isArray(v) ? `${p}[${i}]` : p,
            message: `"${ref}" ${problem}: a key reference is conf[.path] or inputs.<upstream>[.path]`,
          });
        }
      }
    } else if (k === 'ttl') {
      ttlMs = readDuration(v, p, issues);
      if (ttlMs !== undefined && (ttlMs <= 0 || ttlMs > MAX_CACHE_TTL_MS)) {
        issues.push({ path: p, message: `must be more than 0 and at most ${formatDuration(MAX_CACHE_TTL_MS)}` });
      }
    } else issues.push(unknownKey(k, p, CACHE_KEYS));
  }
  if (!Object.hasOwn(value, 'key')) issues.push(missing('key', `${path}.key`));
  if (!Object.hasOwn(value, 'ttl')) issues.push(missing('ttl', `${path}.ttl`));
  if (issues.length > before || key === undefined || ttlMs === undefined) return undefined;
  return { key, ttlMs };
}
