import { readFileSync } from 'node:fs';
import path from 'node:path';

/**
 * The value behind a secret reference in a server file (`--hooks`, `--notify`): `{ env: NAME }` or
 * `{ file: PATH }` (a mounted Kubernetes Secret), never the secret itself, so the file can sit in
 * a ConfigMap. Read at start: a missing secret stops the start, not the first use.
 */
export function readSecretSetting(v: unknown, at: string, cwd: string, what: string): string {
  const ref = typeof v === 'object' && v !== null && !Array.isArray(v) ? (v as Record<string, unknown>) : null;
  if (!ref || Object.keys(ref).length !== 1 || !('env' in ref || 'file' in ref))
    throw new Error(`${at} must be { env: NAME } or { file: PATH }, the ${what}'s place (never the ${what} itself)`);
  if ('env' in ref) {
    const env = process.env[String(ref.env)];
    if (env === undefined || env === '')
      throw new Error(`${at}: the environment variable ${String(ref.env)} is not set`);
    return env;
  }
  const file = path.resolve(cwd, String(ref.file));
  try {
    return readFileSync(file, 'utf8').replace(/\r?\n$/, '');
  } catch (err) {
    throw new Error(`${at}: cannot read ${file}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
  }
}
