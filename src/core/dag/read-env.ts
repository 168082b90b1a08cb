/**
 * A task's `env:` mapping: each name holds a plain string, or `{ secret: <reference> }` naming where
 * the executor finds the value (`env: NAME`, `file: /abs/path`, or `kubernetes: { name, key }`).
 * Secrets are kept apart from plain values so that no reader of the spec can mistake one for the
 * other, and only the reference is ever stored.
 */
import type { DagIssue } from '../dag-spec.js';
import { dns1123SubdomainProblem } from '../kubernetes-names.js';
import type { SecretSource } from '../secret-ref.js';
import { ENV_NAME_PATTERN, checkEnvName, isMapping, readString } from './field-readers.js';
import { expected, keyPath, missing, unknownKey } from './issue-messages.js';

const SECRET_SOURCES = ['env', 'file', 'kubernetes'] as const;
const KUBERNETES_KEYS = ['name', 'key'] as const;
/** The API server's rule for the keys of a Secret's data. */
const SECRET_KEY = /^[-._a-zA-Z0-9]+$/;
/** Leoflow's own variables (the attempt's identity, an agent's token) are never taken from a secret. */
const RESERVED_PREFIX = 'LEOFLOW_';

export interface TaskEnv {
  env: Record<string, string>;
  /** Absent when the task has no secrets, so an unchanged file keeps its hash and version. */
  secretEnv?: Record<string, SecretSource>;
}

/**
 * Reads `env:` at `path`, recording every issue. The entries that could be read come back even when
 * others could not, so the checks that follow (a secret against the task's executor) report too;
 * any issue makes the whole file invalid, so a partial result is never stored.
 */
export function readEnv(value: unknown, path: string, issues: DagIssue[]): TaskEnv | undefined {
  if (!isMapping(value)) {
    issues.push(expected('a mapping of environment variable names to strings or { secret: … }', value, path));
    return undefined;
  }
  const env: [string, string][] = [];
  const secrets: [string, SecretSource][] = [];
  for (const [name, v] of Object.entries(value)) {
    const p = keyPath(path, name);
    if (!checkEnvName(name, p, issues)) continue;
    if (isMapping(v)) {
      const ref = readSecretEntry(name, v, p, issues);
      if (ref !== undefined) secrets.push([name, ref]);
      continue;
    }
    const s = readString(v, p, issues, { noNul: true, quoteHint: true });
    if (s !== undefined) env.push([name, s]);
  }
  // fromEntries defines own properties, so a key such as "__proto__" stays a plain key.
  return { env: Object.fromEntries(env), ...(secrets.length > 0 ? { secretEnv: Object.fromEntries(secrets) } : {}) };
}

function readSecretEntry(
  name: string,
  entry: Record<string, unknown>,
  path: string,
  issues: DagIssue[],
): SecretSource | undefined {
  const keys = Object.keys(entry);
  const unknown = keys.filter((k) => k !== 'secret');
  for (const k of unknown) issues.push(unknownKey(k, keyPath(path, k), ['secret']));
  if (!Object.hasOwn(entry, 'secret')) {
    if (unknown.length === 0) issues.push(missing('secret', `${path}.secret`));
    return undefined;
  }
  if (unknown.length > 0) return undefined;
  if (name.startsWith(RESERVED_PREFIX)) {
    issues.push({
      path,
      message: `a secret cannot set "${name}": names starting with ${RESERVED_PREFIX} are Leoflow's own`,
    });
    return undefined;
  }
  return readSecretRef(entry.secret, `${path}.secret`, issues);
}

/** `{ env: NAME }`, `{ file: /abs/path }` or `{ kubernetes: { name, key } }`: exactly one source. */
export function readSecretRef(value: unknown, path: string, issues: DagIssue[]): SecretSource | undefined {
  const what = `a mapping with exactly one of ${SECRET_SOURCES.join(', ')}`;
  if (!isMapping(value)) {
    issues.push(expected(what, value, path));
    return undefined;
  }
  const keys = Object.keys(value);
  const before = issues.length;
  for (const k of keys) {
    if (!(SECRET_SOURCES as readonly string[]).includes(k))
      issues.push(unknownKey(k, keyPath(path, k), SECRET_SOURCES));
  }
  if (issues.length > before) return undefined;
  if (keys.length !== 1) {
    issues.push({
      path,
      message:
        keys.length === 0
          ? `expected ${what}, got an empty mapping`
          : `expected exactly one of ${SECRET_SOURCES.join(', ')}, got ${keys.join(' and ')}`,
    });
    return undefined;
  }
  const source = keys[0] as (typeof SECRET_SOURCES)[number];
  const p = keyPath(path, source);
  const v = value[source];
  if (source === 'env') {
    const s = readString(v, p, issues, { nonEmpty: true });
    if (s === undefined) return undefined;
    if (!ENV_NAME_PATTERN.test(s)) {
      issues.push(expected('an environment variable name (letters, digits and "_", not starting with a digit)', s, p));
      return undefined;
    }
    return { env: s };
  }
  if (source === 'file') {
    const s = readString(v, p, issues, { nonEmpty: true, noNul: true });
    if (s === undefined) return undefined;
    if (!s.startsWith('/')) {
      issues.push(
        expected('an absolute path (the executor reads it on its own machine, from no particular directory)', s, p),
      );
      return undefined;
    }
    return { file: s };
  }
  return readKubernetesSecret(v, p, issues);
}

function readKubernetesSecret(value: unknown, path: string, issues: DagIssue[]): SecretSource | undefined {
  if (!isMapping(value)) {
    issues.push(expected("a mapping with the Secret's name and key", value, path));
    return undefined;
  }
  const before = issues.length;
  for (const k of Object.keys(value)) {
    if (!(KUBERNETES_KEYS as readonly string[]).includes(k))
      issues.push(unknownKey(k, keyPath(path, k), KUBERNETES_KEYS));
  }
  for (const k of KUBERNETES_KEYS) if (!Object.hasOwn(value, k)) issues.push(missing(k, `${path}.${k}`));
  if (issues.length > before) return undefined;
  const name = readString(value.name, `${path}.name`, issues, { nonEmpty: true });
  const nameProblem = name === undefined ? null : dns1123SubdomainProblem(name);
  if (nameProblem !== null) issues.push({ path: `${path}.name`, message: `a Secret's name ${nameProblem}` });
  const key = readString(value.key, `${path}.key`, issues, { nonEmpty: true });
  if (key !== undefined && (key.length > 253 || !SECRET_KEY.test(key))) {
    issues.push(expected('a Secret key of at most 253 letters, digits, "-", "_" or "."', key, `${path}.key`));
  }
  if (issues.length > before || name === undefined || key === undefined) return undefined;
  return { kubernetes: { name, key } };
}
