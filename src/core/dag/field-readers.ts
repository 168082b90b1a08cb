/**
 * The generic field readers shared by the DAG, task and placement readers. Each takes the raw
 * value and its path and returns the typed value, or undefined having recorded an issue, so a
 * caller can read every field and collect every problem in one pass.
 */
import type { DagIssue } from '../dag-spec.js';
import { parseDuration } from '../duration.js';
import { describe, expected, keyPath } from './issue-messages.js';
import { suggest } from './suggest.js';

/** Keeps `max_active_runs` and friends inside a Postgres `integer`. */
export const MAX_INT4 = 2_147_483_647;

const ID_PATTERN = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$/;
const ID_RULE = 'an id of 1-100 letters, digits, "_", "." or "-", starting with a letter or digit';
export const ENV_NAME_PATTERN = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** Whether `name` is an environment variable's name; the issue of one that is not is pushed. */
export function checkEnvName(name: string, path: string, issues: DagIssue[]): boolean {
  if (ENV_NAME_PATTERN.test(name)) return true;
  issues.push({
    path,
    message: `invalid environment variable name "${name}": expected letters, digits and "_", not starting with a digit`,
  });
  return false;
}

/** A YAML mapping, as `toJS` returns it: a plain object, never a list or null. */
export function isMapping(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** A DAG or task id: 1-100 letters, digits, `_`, `.` or `-`, starting with a letter or digit. */
export function readId(value: unknown, path: string, issues: DagIssue[]): string | undefined {
  if (typeof value === 'string' && ID_PATTERN.test(value)) return value;
  issues.push(expected(ID_RULE, value, path));
  return undefined;
}

/** What {@link readString} checks beyond "is a string". */
export interface StringRules {
  nonEmpty?: boolean;
  noNul?: boolean;
  /** Numbers and booleans get a "quote it" hint: YAML read `8080` or `true` as a non-string. */
  quoteHint?: boolean;
}

/** A string, never coerced from a number or boolean. */
export function readString(
  value: unknown,
  path: string,
  issues: DagIssue[],
  rules: StringRules = {},
): string | undefined {
  if (typeof value !== 'string') {
    const hint =
      rules.quoteHint && (typeof value === 'number' || typeof value === 'boolean')
        ? ` (quote it: "${String(value)}")`
        : '';
    issues.push({
      path,
      message: `expected ${rules.nonEmpty ? 'a non-empty string' : 'a string'}, got ${describe(value)}${hint}`,
    });
    return undefined;
  }
  if (rules.nonEmpty && value === '') {
    issues.push(expected('a non-empty string', value, path));
    return undefined;
  }
  if (rules.noNul && value.includes('\0')) {
    issues.push({ path, message: 'must not contain a NUL character' });
    return undefined;
  }
  return value;
}

/** A YAML boolean; `yes`/`no` are strings in YAML 1.2 and are refused. */
export function readBoolean(value: unknown, path: string, issues: DagIssue[]): boolean | undefined {
  if (typeof value === 'boolean') return value;
  issues.push(expected('true or false', value, path));
  return undefined;
}

/** An integer in `[min, max]`; the common 1..MAX_INT4 range reads as "a positive integer". */
export function readInteger(
  value: unknown,
  path: string,
  min: number,
  max: number,
  issues: DagIssue[],
): number | undefined {
  if (typeof value === 'number' && Number.isInteger(value) && value >= min && value <= max) return value;
  let what = `an integer from ${min} to ${max}`;
  if (min === 1 && max === MAX_INT4) {
    what = typeof value === 'number' && value > max ? `a positive integer no larger than ${max}` : 'a positive integer';
  }
  issues.push(expected(what, value, path));
  return undefined;
}

/** A duration like `30s` or `1h30m`, in milliseconds; the message is `parseDuration`'s own. */
export function readDuration(value: unknown, path: string, issues: DagIssue[]): number | undefined {
  try {
    return parseDuration(value);
  } catch (err) {
    issues.push({ path, message: err instanceof Error ? err.message : String(err) });
    return undefined;
  }
}

/** One of `allowed`, with a "did you mean" hint for a near miss. */
export function readEnum<T extends string>(
  value: unknown,
  path: string,
  allowed: readonly T[],
  issues: DagIssue[],
): T | undefined {
  if (typeof value === 'string' && (allowed as readonly string[]).includes(value)) return value as T;
  const hint = typeof value === 'string' ? suggest(value, allowed) : undefined;
  issues.push(expected(`one of ${allowed.join(', ')}`, value, path, hint));
  return undefined;
}

/** A list of distinct non-empty strings. */
export function readStringList(value: unknown, path: string, issues: DagIssue[], what: string): string[] | undefined {
  if (!Array.isArray(value)) {
    issues.push(expected(`a list of ${what} strings`, value, path));
    return undefined;
  }
  const before = issues.length;
  const seen = new Set<string>();
  for (const [i, item] of value.entries()) {
    const p = `${path}[${i}]`;
    if (typeof item !== 'string' || item === '') issues.push(expected(`a non-empty ${what} string`, item, p));
    else if (seen.has(item)) issues.push({ path: p, message: `duplicate ${what} "${item}"` });
    else seen.add(item);
  }
  return issues.length > before ? undefined : [...seen];
}

/** A mapping of string to string; environment variable names are checked, values never coerced. */
export function readStringMap(
  value: unknown,
  path: string,
  issues: DagIssue[],
  what: 'environment variable' | 'label',
): Record<string, string> | undefined {
  if (!isMapping(value)) {
    issues.push(expected(`a mapping of ${what} names to string values`, value, path));
    return undefined;
  }
  const before = issues.length;
  const entries: [string, string][] = [];
  for (const [key, v] of Object.entries(value)) {
    const p = keyPath(path, key);
    if (what === 'environment variable') checkEnvName(key, p, issues);
    else if (what === 'label' && key === '') {
      issues.push({ path: p, message: 'label names must not be empty' });
    }
    const s = readString(v, p, issues, { noNul: true, quoteHint: true });
    if (s !== undefined) entries.push([key, s]);
  }
  // fromEntries defines own properties, so a key such as "__proto__" stays a plain key.
  return issues.length > before ? undefined : Object.fromEntries(entries);
}
