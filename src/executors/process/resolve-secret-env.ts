/**
 * The values of an attempt's secret variables, read by whoever starts its process, at the start:
 * from this process's environment, from a file on this machine, or (a Kubernetes Secret) from the
 * environment the pod was given by its `secretKeyRef`. Errors name the variable and where it was
 * looked for, never a value, since they become the attempt's system log line and its error.
 */
import { openSync, readSync, closeSync, fstatSync } from 'node:fs';
import { hostname } from 'node:os';
import { describeSecretRef, MAX_SECRET_FILE_BYTES, type SecretSource } from '../../core/secret-ref.js';

export type ResolvedSecrets = { ok: true; env: Record<string, string> } | { ok: false; error: string };

/** Resolves every reference, or says why the first that cannot be resolved cannot. */
export function resolveSecretEnv(
  refs: Readonly<Record<string, SecretSource>> | undefined,
  from: NodeJS.ProcessEnv = process.env,
): ResolvedSecrets {
  const env: [string, string][] = [];
  for (const [name, ref] of Object.entries(refs ?? {})) {
    const value = resolveOne(ref, name, from);
    if (typeof value !== 'string')
      return { ok: false, error: `secret ${name} (${describeSecretRef(ref)}): ${value.problem}` };
    if (value.includes('\0'))
      return {
        ok: false,
        error:
          `secret ${name} (${describeSecretRef(ref)}): the value holds a NUL byte, ` +
          `which no process environment can carry`,
      };
    env.push([name, value]);
  }
  return { ok: true, env: Object.fromEntries(env) };
}

function resolveOne(ref: SecretSource, name: string, from: NodeJS.ProcessEnv): string | { problem: string } {
  if ('env' in ref) {
    const v = from[ref.env];
    return v === undefined
      ? {
          problem:
            `environment variable ${ref.env} is not set where the task starts (host ${hostname()}, ` +
            `pid ${process.pid})`,
        }
      : v;
  }
  if ('file' in ref) return readSecretFile(ref.file);
  // The pod's manifest sets the variable under its own name from the Secret (pod-manifest.ts).
  const v = from[name];
  return v === undefined
    ? {
        problem:
          `a Kubernetes Secret is given only to a pod of the kubernetes executor, ` +
          `and ${name} is not set here (host ${hostname()})`,
      }
    : v;
}

/** The whole file, up to the limit; larger files are refused rather than cut. */
function readSecretFile(path: string): string | { problem: string } {
  let fd: number;
  try {
    fd = openSync(path, 'r');
  } catch (err) {
    return { problem: `cannot read ${path}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}` };
  }
  try {
    const st = fstatSync(fd);
    if (!st.isFile()) return { problem: `${path} is not a regular file` };
    if (st.size > MAX_SECRET_FILE_BYTES)
      return { problem: `${path} holds ${st.size} bytes, more than the limit of ${MAX_SECRET_FILE_BYTES}` };
    const buf = Buffer.alloc(st.size);
    let at = 0;
    while (at < buf.length) {
      const n = readSync(fd, buf, at, buf.length - at, at);
      if (n === 0) break;
      at += n;
    }
    return buf.subarray(0, at).toString('utf8');
  } catch (err) {
    return { problem: `cannot read ${path}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}` };
  } finally {
    closeSync(fd);
  }
}
