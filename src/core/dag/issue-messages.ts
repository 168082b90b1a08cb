/**
 * How a DAG issue reads: the shared wording of "expected X, got Y", missing and unknown keys, and
 * field paths. Every reader builds its messages here so the same mistake reads the same anywhere
 * in the file.
 */
import type { DagIssue } from '../dag-spec.js';
import { suggest } from './suggest.js';

/** `expected <what>, got <value>`, with a "did you mean" hint when a suggestion is given. */
export function expected(what: string, value: unknown, path: string, suggestion?: string): DagIssue {
  const hint = suggestion === undefined ? '' : ` (did you mean "${suggestion}"?)`;
  return { path, message: `expected ${what}, got ${describe(value)}${hint}` };
}

/** A required key that the mapping at `path` does not have. */
export function missing(key: string, path: string): DagIssue {
  return { path, message: `missing required key "${key}"` };
}

/** A key no reader knows, with the closest allowed key when it looks like a typo. */
export function unknownKey(key: string, path: string, allowed: readonly string[]): DagIssue {
  const close = suggest(key, allowed);
  const hint = close === undefined ? '' : ` (did you mean "${close}"?)`;
  return { path, message: `unknown key "${key}"${hint}; allowed keys: ${allowed.join(', ')}` };
}

/** `tasks[0].env.FOO`, or `labels["kubernetes.io/arch"]` when the key is not a plain name. */
export function keyPath(parent: string, key: string): string {
  if (/^[A-Za-z_][A-Za-z0-9_-]*$/.test(key)) return parent === '' ? key : `${parent}.${key}`;
  return `${parent}[${JSON.stringify(key)}]`;
}

/** A value as an issue quotes it: strings quoted and cut at 60 characters, containers by kind. */
export function describe(value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(value.length > 60 ? `${value.slice(0, 60)}…` : value);
  if (value === undefined) return 'nothing';
  if (value === null || typeof value !== 'object') return String(value);
  if (Array.isArray(value)) return value.length === 0 ? 'an empty list' : 'a list';
  return 'a mapping';
}

/** prettyErrors appends a code excerpt after the position; one line is enough for an issue. */
export function firstLine(err: unknown): string {
  const message = err instanceof Error ? err.message : String(err);
  return (message.split('\n')[0] ?? '').replace(/:$/, '');
}
