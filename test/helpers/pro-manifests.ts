import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect } from 'vitest';
import { parseAllDocuments } from 'yaml';
import type { Config } from '../../src/server/config/config.js';
import { loadConfig } from '../../src/server/config/load-config.js';
import { SETTINGS, type SettingKey } from '../../src/server/config/settings.js';

/**
 * The Pro deployment (`editions/pro/kubernetes/`) read as Kubernetes would, for the tests that
 * check it against the code it deploys. (No cluster and no container engine run here.)
 */
export const ROOT = fileURLToPath(new URL('../../', import.meta.url));
export const DIR = path.join(ROOT, 'editions/pro/kubernetes');

export type Obj = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

export function readManifests(): { file: string; obj: Obj }[] {
  const out: { file: string; obj: Obj }[] = [];
  for (const file of readdirSync(DIR).filter((f) => f.endsWith('.yaml') && f !== 'kustomization.yaml')) {
    for (const doc of parseAllDocuments(readFileSync(path.join(DIR, file), 'utf8'))) {
      expect(doc.errors, file).toEqual([]);
      out.push({ file, obj: doc.toJS() as Obj });
    }
  }
  return out;
}

export const manifests = readManifests();
export const kustomization = parseAllDocuments(
  readFileSync(path.join(DIR, 'kustomization.yaml'), 'utf8'),
)[0]!.toJS() as Obj;
export const ofKind = (kind: string) => manifests.filter((m) => m.obj.kind === kind).map((m) => m.obj);
export const one = (kind: string) => {
  const all = ofKind(kind);
  expect(all, kind).toHaveLength(1);
  return all[0]!;
};
export const deployment = one('Deployment');
export const pod = deployment.spec.template.spec;
export const container = pod.containers[0];
export const configMap = one('ConfigMap');
export const proDefaults = JSON.parse(readFileSync(path.join(ROOT, 'editions/pro/config.json'), 'utf8')) as Record<
  string,
  string
>;

/**
 * The configuration a replica of this Deployment compiles: its args as flags, its environment.
 * `files` rewrites paths in the environment (a mounted Secret's folder to a local one).
 */
export function deployedConfig(
  c: Obj = container,
  cm: Obj = configMap,
  files: (v: string) => string = (v) => v,
  namespace: string = deployment.metadata.namespace,
): Config {
  const [command, ...rest] = c.args as string[];
  expect(command).toBe('server');
  const flagToKey = new Map<string, SettingKey>(Object.entries(SETTINGS).map(([k, s]) => [s.flag, k as SettingKey]));
  const flags: Partial<Record<SettingKey, string>> = {};
  for (let i = 0; i < rest.length; i += 2) {
    const key = flagToKey.get(rest[i]!);
    expect(key, `container arg ${rest[i]} is not a flag of leoflow server`).toBeDefined();
    flags[key!] = rest[i + 1]!;
  }
  const env: NodeJS.ProcessEnv = Object.fromEntries(
    Object.entries(cm.data as Record<string, string>).map(([k, v]) => [k, files(v)]),
  );
  for (const e of c.env as Obj[]) {
    if (e.valueFrom?.secretKeyRef?.name === 'leoflow-auth')
      env[e.name] = 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855';
    else if (e.valueFrom?.secretKeyRef) env[e.name] = 'postgres://leoflow@db.example.internal:5432/leoflow';
    else if (e.valueFrom?.fieldRef?.fieldPath === 'metadata.name') env[e.name] = 'leoflow-7c9d8f6b5d-x2x7q';
    else if (e.valueFrom?.fieldRef?.fieldPath === 'metadata.namespace') env[e.name] = namespace;
    else env[e.name] = e.value;
  }
  return loadConfig(flags, env, '/app');
}

/** Whether kubectl is on the PATH: it renders the kustomizations, as a user's `kubectl apply -k` would. */
export function hasKubectl(): boolean {
  try {
    execFileSync('kubectl', ['version', '--client'], { stdio: 'ignore' });
    return true;
  } catch {
    return false; // no kubectl here: nothing renders the kustomizations
  }
}
