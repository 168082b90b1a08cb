import { execFileSync } from 'node:child_process';
import {
  copyFileSync,
  cpSync,
  existsSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { parseAllDocuments } from 'yaml';
import type { Config } from '../../src/server/config/config.js';
import { loadConfig } from '../../src/server/config/load-config.js';
import { SETTINGS, type SettingKey } from '../../src/server/config/settings.js';
import { createMetrics } from '../../src/server/observability/metrics.js';
import { serveMetrics } from '../../src/server/observability/serve-metrics.js';
import { makeTestPki, type TestPki } from '../helpers/test-certs.js';

/**
 * The Pro deployment (`editions/pro/kubernetes/`, `editions/pro/Containerfile`) read as Kubernetes
 * and a container builder would, and checked against the code it deploys: the probes hit the
 * endpoints and port the server serves, the container's flags and environment are accepted by the
 * real configuration code, RBAC stays in one namespace without wildcards, and the image runs the
 * real entry point as a non-root user. (No cluster and no container engine run here.)
 */

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const DIR = path.join(ROOT, 'editions/pro/kubernetes');

type Obj = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

function readManifests(): { file: string; obj: Obj }[] {
  const out: { file: string; obj: Obj }[] = [];
  for (const file of readdirSync(DIR).filter((f) => f.endsWith('.yaml') && f !== 'kustomization.yaml')) {
    for (const doc of parseAllDocuments(readFileSync(path.join(DIR, file), 'utf8'))) {
      expect(doc.errors, file).toEqual([]);
      out.push({ file, obj: doc.toJS() as Obj });
    }
  }
  return out;
}

const manifests = readManifests();
const kustomization = parseAllDocuments(readFileSync(path.join(DIR, 'kustomization.yaml'), 'utf8'))[0]!.toJS() as Obj;
const ofKind = (kind: string) => manifests.filter((m) => m.obj.kind === kind).map((m) => m.obj);
const one = (kind: string) => {
  const all = ofKind(kind);
  expect(all, kind).toHaveLength(1);
  return all[0]!;
};
const deployment = one('Deployment');
const pod = deployment.spec.template.spec;
const container = pod.containers[0];
const configMap = one('ConfigMap');
const proDefaults = JSON.parse(readFileSync(path.join(ROOT, 'editions/pro/config.json'), 'utf8')) as Record<
  string,
  string
>;

/**
 * The configuration a replica of this Deployment compiles: its args as flags, its environment.
 * `files` rewrites paths in the environment (a mounted Secret's folder to a local one).
 */
function deployedConfig(
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

describe('Pro Kubernetes manifests', () => {
  it('lists every manifest in the kustomization, each with the required fields, in one of two namespaces', () => {
    const files = readdirSync(DIR).filter((f) => f.endsWith('.yaml') && f !== 'kustomization.yaml');
    expect([...kustomization.resources].sort()).toEqual(files.sort());
    // No namespace transformer: it would move the tasks' Role into the control plane's namespace.
    expect(kustomization.namespace).toBeUndefined();
    const tasks = deployedConfig().kubernetes!.namespace;
    expect(tasks).toBe('leoflow-tasks');
    for (const { file, obj } of manifests) {
      expect(obj.apiVersion, file).toEqual(expect.any(String));
      expect(obj.kind, file).toEqual(expect.any(String));
      expect(obj.metadata?.name, file).toMatch(/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/);
      // The tasks' namespace holds only the control plane's rights there; everything else is its own.
      expect(obj.metadata?.namespace, file).toBe(['Role', 'RoleBinding'].includes(obj.kind) ? tasks : 'leoflow');
    }
    expect(manifests.map((m) => m.obj.kind).sort()).toEqual([
      'ConfigMap',
      'Deployment',
      'PodDisruptionBudget',
      'Role',
      'RoleBinding',
      'Service',
      'Service',
      'ServiceAccount',
    ]);
  });

  it('runs three replicas whose selector matches their pods, under the service account', () => {
    expect(deployment.spec.replicas).toBe(3);
    const labels = deployment.spec.template.metadata.labels;
    expect(labels).toMatchObject(deployment.spec.selector.matchLabels);
    expect(pod.serviceAccountName).toBe(one('ServiceAccount').metadata.name);
    expect(container.envFrom).toEqual([{ configMapRef: { name: configMap.metadata.name } }]);
    expect(container.resources.requests).toEqual({ cpu: expect.any(String), memory: expect.any(String) });
    const pdb = one('PodDisruptionBudget');
    expect(labels).toMatchObject(pdb.spec.selector.matchLabels);
    expect(pdb.spec.maxUnavailable).toBeLessThan(deployment.spec.replicas);
  });

  it('passes flags and environment the real configuration code accepts, with the database URL from a Secret', () => {
    for (const key of Object.keys(configMap.data)) {
      expect(
        Object.values(SETTINGS).map((s) => s.env),
        `ConfigMap key ${key}`,
      ).toContain(key);
    }
    const dbEnv = (container.env as Obj[]).find((e) => e.name === SETTINGS.database.env)!;
    expect(dbEnv.valueFrom.secretKeyRef).toEqual({ name: expect.any(String), key: expect.any(String) });
    expect(configMap.data[SETTINGS.database.env]).toBeUndefined();
    const config = deployedConfig();
    expect(config).toMatchObject({
      edition: 'pro',
      role: 'auto',
      dispatchWorkers: 16,
      dispatchQueue: 256,
      replicaId: 'leoflow-7c9d8f6b5d-x2x7q',
    });
    // A graceful stop fits in the pod's grace period.
    expect(pod.terminationGracePeriodSeconds * 1000).toBeGreaterThan(config.shutdownGraceMs);
  });

  it('runs with auth on, the admin token from a Secret, never --insecure', () => {
    const config = deployedConfig();
    expect(config).toMatchObject({
      authRequired: true,
      insecure: false,
      bootstrapAdminToken: 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855',
    });
    const adminEnv = (container.env as Obj[]).find((e) => e.name === SETTINGS.bootstrap_admin_token.env)!;
    expect(adminEnv.valueFrom.secretKeyRef).toEqual({ name: 'leoflow-auth', key: 'admin-token' });
    expect(configMap.data[SETTINGS.insecure.env]).toBeUndefined();
    expect(container.args).not.toContain('--insecure');
  });

  it("runs the Kubernetes executor, its task pods on the deployment's own image, kept equal by the kustomization", () => {
    const config = deployedConfig();
    expect(config.executor).toBe('kubernetes');
    expect(config.kubernetes!.maxFreeRetries, 'a lost node spends no try 3 times, then spends one').toBe(3);
    const imageEnv = (container.env as Obj[]).find((e) => e.name === SETTINGS.kubernetes_image.env)!;
    expect(imageEnv.value).toBe(container.image);
    expect(kustomization.replacements).toEqual([
      expect.objectContaining({
        source: expect.objectContaining({
          kind: 'Deployment',
          fieldPath: 'spec.template.spec.containers.[name=leoflow].image',
        }),
        targets: [
          expect.objectContaining({
            fieldPaths: [
              `spec.template.spec.containers.[name=leoflow].env.[name=${SETTINGS.kubernetes_image.env}].value`,
            ],
          }),
        ],
      }),
    ]);
  });

  it('points the probes at /healthz and /readyz on the port the server serves its metrics on, and those answer', async () => {
    const config = deployedConfig();
    const port = (name: string | number) =>
      typeof name === 'number' ? name : (container.ports as Obj[]).find((p) => p.name === name)!.containerPort;
    expect(config.metricsListen).not.toBeNull();
    expect(config.metricsListen!.port).toBe(Number(proDefaults.metrics_listen!.split(':')[1]));
    expect(config.listenPort).toBe(Number(proDefaults.listen!.split(':')[1]));
    for (const probe of ['startupProbe', 'livenessProbe', 'readinessProbe']) {
      expect(port(container[probe].httpGet.port), probe).toBe(config.metricsListen!.port);
    }
    expect(container.livenessProbe.httpGet.path).toBe('/healthz');
    expect(container.readinessProbe.httpGet.path).toBe('/readyz');
    expect(port('grpc')).toBe(config.listenPort);

    // The paths are the server's own: its metrics port answers them (404 for any other path).
    const health = { live: async () => ({ ok: true, checks: [] }), ready: async () => ({ ok: true, checks: [] }) };
    const server = await serveMetrics(createMetrics(), '127.0.0.1', 0, health);
    try {
      for (const probe of ['startupProbe', 'livenessProbe', 'readinessProbe']) {
        const res = await fetch(`http://127.0.0.1:${server.address.port}${container[probe].httpGet.path}`);
        expect(res.status, probe).toBe(200);
      }
      expect((await fetch(`http://127.0.0.1:${server.address.port}/health`)).status).toBe(404);
    } finally {
      await server.close();
    }
  });

  it('has a Service for the API and one for metrics, each selecting the pods on a port they expose', () => {
    const services = ofKind('Service');
    const ports = new Map((container.ports as Obj[]).map((p) => [p.name, p.containerPort]));
    for (const s of services) expect(deployment.spec.template.metadata.labels).toMatchObject(s.spec.selector);
    const targets = services.flatMap((s) => (s.spec.ports as Obj[]).map((p) => p.targetPort));
    expect(targets.sort()).toEqual(['grpc', 'metrics']);
    for (const t of targets) expect(ports.has(t)).toBe(true);
  });

  it('runs as a non-root user on a read-only root file system, the state directory on an emptyDir', () => {
    expect(pod.securityContext).toMatchObject({ runAsNonRoot: true });
    expect(pod.securityContext.runAsUser).toBeGreaterThan(0);
    expect(container.securityContext).toMatchObject({
      allowPrivilegeEscalation: false,
      readOnlyRootFilesystem: true,
      capabilities: { drop: ['ALL'] },
    });
    const config = deployedConfig();
    const mount = (container.volumeMounts as Obj[]).find((m) => m.mountPath === config.stateDir);
    expect(mount, `a volume at the state directory ${config.stateDir}`).toBeDefined();
    expect((pod.volumes as Obj[]).find((v) => v.name === mount!.name)).toMatchObject({ emptyDir: expect.any(Object) });
  });

  it("binds a Role limited to pods, pods/log and events in the tasks' namespace only, with no wildcard", () => {
    expect(ofKind('ClusterRole')).toEqual([]);
    expect(ofKind('ClusterRoleBinding')).toEqual([]);
    const role = one('Role');
    for (const rule of role.rules as Obj[]) {
      for (const field of ['apiGroups', 'resources', 'verbs']) {
        expect(rule[field], field).toEqual(expect.any(Array));
        for (const v of rule[field]) expect(v, `${field} of ${JSON.stringify(rule)}`).not.toContain('*');
      }
      expect(rule.apiGroups).toEqual(['']);
      expect(rule.nonResourceURLs).toBeUndefined();
      expect(rule.resourceNames).toBeUndefined();
      for (const r of rule.resources) expect(['pods', 'pods/log', 'events']).toContain(r);
      for (const v of rule.verbs) expect(['get', 'list', 'watch', 'create', 'delete']).toContain(v);
    }
    expect((role.rules as Obj[]).flatMap((r) => r.resources).sort()).toEqual(['events', 'pods', 'pods/log']);
    // Only the verbs the executor calls (test/integration/kubernetes-shipped-rbac.test.ts runs it on
    // these rules alone): it lists and watches pods, never reads one by name.
    const verbsOf = (resource: string) => (role.rules as Obj[]).find((r) => r.resources.includes(resource))?.verbs;
    expect(verbsOf('pods').slice().sort()).toEqual(['create', 'delete', 'list', 'watch']);
    expect(verbsOf('pods/log')).toEqual(['get']);
    expect(verbsOf('events')).toEqual(['list']);
    const binding = one('RoleBinding');
    expect(binding.roleRef).toEqual({ apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: role.metadata.name });
    expect(binding.subjects).toEqual([
      { kind: 'ServiceAccount', name: pod.serviceAccountName, namespace: deployment.metadata.namespace },
    ]);
    // The rights are where the tasks run, and nowhere else: none in the control plane's namespace,
    // which the server knows as its own and keeps tasks out of.
    const config = deployedConfig();
    expect(role.metadata.namespace).toBe(config.kubernetes!.namespace);
    expect(binding.metadata.namespace).toBe(role.metadata.namespace);
    expect(config.kubernetes!.controlPlaneNamespace).toBe(deployment.metadata.namespace);
    expect(config.kubernetes!.namespace).not.toBe(deployment.metadata.namespace);
  });

  let kubectl = false;
  try {
    execFileSync('kubectl', ['version', '--client'], { stdio: 'ignore' });
    kubectl = true;
  } catch {
    // no kubectl here: the kustomization is checked by hand above
  }
  it.skipIf(!kubectl)('builds with kubectl kustomize into the same objects', () => {
    const out = execFileSync('kubectl', ['kustomize', DIR], { encoding: 'utf8' });
    const built = parseAllDocuments(out).map((d) => d.toJS() as Obj);
    expect(built.map((o) => `${o.kind}/${o.metadata.name}`).sort()).toEqual(
      manifests.map((m) => `${m.obj.kind}/${m.obj.metadata.name}`).sort(),
    );
  });
});

/**
 * A strategic merge patch as kustomize applies the overlay's (enough for them: maps merged, lists
 * of named items merged by name, other lists replaced), so the test needs no kubectl; with kubectl
 * present, its build is compared with this one.
 */
function mergePatch(base: unknown, patch: unknown): unknown {
  if (Array.isArray(base) && Array.isArray(patch)) {
    if (!patch.every((p) => typeof p?.name === 'string')) return patch;
    const out = base.map((b) => {
      const p = patch.find((x) => x.name === b?.name);
      return p ? mergePatch(b, p) : b;
    });
    return [...out, ...patch.filter((p) => !base.some((b) => b?.name === p.name))];
  }
  if (base && patch && typeof base === 'object' && typeof patch === 'object' && !Array.isArray(base)) {
    const out: Obj = { ...(base as Obj) };
    for (const [k, v] of Object.entries(patch as Obj)) out[k] = k in out ? mergePatch(out[k], v) : v;
    return out;
  }
  return patch;
}

describe('Pro Kubernetes manifests with TLS (the kubernetes-tls overlay)', () => {
  const TLS_DIR = path.join(ROOT, 'editions/pro/kubernetes-tls');
  const overlay = parseAllDocuments(readFileSync(path.join(TLS_DIR, 'kustomization.yaml'), 'utf8'))[0]!.toJS() as Obj;
  const patches = (overlay.patches as { path: string }[]).map(({ path: file }) => {
    const docs = parseAllDocuments(readFileSync(path.join(TLS_DIR, file), 'utf8'));
    expect(docs, file).toHaveLength(1);
    expect(docs[0]!.errors, file).toEqual([]);
    return { file, obj: docs[0]!.toJS() as Obj };
  });
  const patched = (kind: string) => {
    const base = kind === 'Service' ? ofKind('Service').find((x) => x.metadata.name === 'leoflow')! : one(kind);
    const p = patches.find((x) => x.obj.kind === kind);
    return p ? (mergePatch(base, p.obj) as Obj) : base;
  };
  const tlsDeployment = patched('Deployment');
  const tlsContainer = tlsDeployment.spec.template.spec.containers[0];
  const tlsConfigMap = patched('ConfigMap');

  /** The Secret the server's files come from, laid out as Kubernetes mounts it, in a local folder. */
  function mountedSecret(pki: TestPki): { mountPath: string; files: (v: string) => string } {
    const volume = (tlsDeployment.spec.template.spec.volumes as Obj[]).find(
      (v) => v.secret?.secretName === 'leoflow-tls',
    )!;
    expect(volume, 'a volume of the leoflow-tls Secret').toBeDefined();
    const mount = (tlsContainer.volumeMounts as Obj[]).find((m) => m.name === volume.name)!;
    expect(mount).toMatchObject({ readOnly: true });
    const local = mkdtempSync(path.join(pki.dir, 'secret-'));
    // The keys of a kubernetes.io/tls Secret with its CA, as cert-manager writes them.
    copyFileSync(pki.server.cert, path.join(local, 'tls.crt'));
    copyFileSync(pki.server.key, path.join(local, 'tls.key'));
    copyFileSync(pki.ca, path.join(local, 'ca.crt'));
    return {
      mountPath: mount.mountPath,
      files: (v) => (v.startsWith(`${mount.mountPath}/`) ? path.join(local, v.slice(mount.mountPath.length + 1)) : v),
    };
  }

  it('builds on ../kubernetes (not inside it: kustomize refuses that cycle), patching only objects the base has', () => {
    expect(overlay.resources).toEqual(['../kubernetes']);
    expect(patches.map((p) => p.file).sort()).toEqual(
      readdirSync(TLS_DIR)
        .filter((f) => f.endsWith('.yaml') && f !== 'kustomization.yaml')
        .sort(),
    );
    for (const { file, obj } of patches) {
      expect(
        manifests.some(
          (m) =>
            m.obj.kind === obj.kind &&
            m.obj.metadata.name === obj.metadata.name &&
            m.obj.metadata.namespace === obj.metadata.namespace,
        ),
        file,
      ).toBe(true);
    }
  });

  it('serves TLS from the mounted Secret, with settings the real configuration code accepts, and points pods at https with the CA', () => {
    const pki = makeTestPki();
    try {
      const { files } = mountedSecret(pki);
      for (const key of Object.keys(tlsConfigMap.data))
        expect(
          Object.values(SETTINGS).map((x) => x.env),
          `ConfigMap key ${key}`,
        ).toContain(key);
      const config = deployedConfig(tlsContainer, tlsConfigMap, files);
      expect(config.tls).not.toBeNull();
      expect(config.tls!.cert.toString()).toContain('BEGIN CERTIFICATE');
      expect(config.tls!.clientCa).toBeNull();
      expect(config).toMatchObject({ edition: 'pro', authRequired: true, insecure: false, executor: 'kubernetes' });
      expect(config.kubernetes!.serverUrl).toMatch(/^https:\/\//);
      // The CA only, from a ConfigMap in the tasks' namespace: the certificate's key stays in leoflow.
      expect(config.kubernetes!.podCa).toEqual({ kind: 'configmap', name: 'leoflow-ca', key: 'ca.crt' });
      // The commented mTLS line, uncommented, is accepted too (pods get in with their attempts' tokens).
      const mtlsLine = /#\s*(LEOFLOW_TLS_CLIENT_CA):\s*"([^"]+)"/.exec(
        readFileSync(path.join(TLS_DIR, 'configmap-tls.yaml'), 'utf8'),
      )!;
      expect(mtlsLine, 'the commented LEOFLOW_TLS_CLIENT_CA line').not.toBeNull();
      const mtls = deployedConfig(
        tlsContainer,
        { data: { ...tlsConfigMap.data, [mtlsLine[1]!]: mtlsLine[2]! } },
        files,
      );
      expect(mtls.tls).toMatchObject({ clientAuth: 'agents' });
      expect(mtls.tls!.clientCa!.toString()).toContain('BEGIN CERTIFICATE');
    } finally {
      pki.remove();
    }
  });

  it('keeps the probes on the plain metrics port, and the Service says the API port is TLS', () => {
    for (const probe of ['startupProbe', 'livenessProbe', 'readinessProbe']) {
      expect(tlsContainer[probe].httpGet.port, probe).toBe('metrics');
      expect(tlsContainer[probe].httpGet.scheme ?? 'HTTP', probe).toBe('HTTP');
    }
    const service = patched('Service');
    expect(service.spec.ports).toEqual([
      expect.objectContaining({ name: 'grpc', port: 7070, targetPort: 'grpc', appProtocol: 'https' }),
    ]);
    // Nothing else of the base changed in the container.
    expect(tlsContainer.args).toEqual(container.args);
    expect(tlsContainer.env).toEqual(container.env);
  });

  let kubectl = false;
  try {
    execFileSync('kubectl', ['version', '--client'], { stdio: 'ignore' });
    kubectl = true;
  } catch {
    // no kubectl here: the merge above stands in for kustomize
  }
  it.skipIf(!kubectl)('builds with kubectl kustomize into the objects the merge above makes', () => {
    const built = parseAllDocuments(execFileSync('kubectl', ['kustomize', TLS_DIR], { encoding: 'utf8' })).map(
      (d) => d.toJS() as Obj,
    );
    expect(built.map((o) => `${o.kind}/${o.metadata.name}`).sort()).toEqual(
      manifests.map((m) => `${m.obj.kind}/${m.obj.metadata.name}`).sort(),
    );
    const byName = (xs: Obj[]) => [...xs].sort((a, b) => String(a.name).localeCompare(String(b.name)));
    const d = built.find((o) => o.kind === 'Deployment')!;
    const c = d.spec.template.spec.containers[0];
    expect(byName(c.volumeMounts)).toEqual(byName(tlsContainer.volumeMounts));
    expect(byName(d.spec.template.spec.volumes)).toEqual(byName(tlsDeployment.spec.template.spec.volumes));
    expect(built.find((o) => o.kind === 'ConfigMap')!.data).toEqual(tlsConfigMap.data);
    expect(built.find((o) => o.kind === 'Service' && o.metadata.name === 'leoflow')!.spec).toEqual(
      patched('Service').spec,
    );
  });
});

describe('the image set once, as `kustomize edit set image` does, in either overlay', () => {
  let kubectl = false;
  try {
    execFileSync('kubectl', ['version', '--client'], { stdio: 'ignore' });
    kubectl = true;
  } catch {
    // no kubectl here: nothing renders the kustomizations
  }
  for (const overlay of ['kubernetes', 'kubernetes-tls', 'install']) {
    it.skipIf(!kubectl)(
      `${overlay}: the control plane and its task pods (LEOFLOW_KUBERNETES_IMAGE) get the new image`,
      () => {
        const tmp = mkdtempSync(path.join(tmpdir(), 'leoflow-kustomize-'));
        try {
          for (const dir of ['kubernetes', 'kubernetes-tls', 'install'])
            cpSync(path.join(ROOT, 'editions/pro', dir), path.join(tmp, dir), { recursive: true });
          // What `kustomize edit set image leoflow=registry.example.com/leoflow:0.2.0` does (kustomize's
          // `images` field; kubectl has no `edit`, so it is written as kustomize writes it): a new
          // entry, or the install overlay's own entry changed.
          const k = path.join(tmp, overlay, 'kustomization.yaml');
          const text = readFileSync(k, 'utf8');
          writeFileSync(
            k,
            text.includes('images:')
              ? text.replace(/newTag: \S+/, 'newTag: 0.2.0')
              : `${text}images:\n  - name: leoflow\n    newName: registry.example.com/leoflow\n    newTag: 0.2.0\n`,
          );
          const built = parseAllDocuments(
            execFileSync('kubectl', ['kustomize', path.join(tmp, overlay)], { encoding: 'utf8' }),
          ).map((d) => d.toJS() as Obj);
          const c = built.find((o) => o.kind === 'Deployment')!.spec.template.spec.containers[0];
          expect(c.image).toBe('registry.example.com/leoflow:0.2.0');
          expect((c.env as Obj[]).find((e) => e.name === SETTINGS.kubernetes_image.env)?.value).toBe(
            'registry.example.com/leoflow:0.2.0',
          );
        } finally {
          rmSync(tmp, { recursive: true, force: true });
        }
      },
    );
  }
});

/** A Containerfile's instructions, stage by stage (continuation lines joined, comments dropped). */
function parseContainerfile(
  text: string,
): { from: string; name: string | null; steps: { op: string; args: string }[] }[] {
  const lines = text
    .replace(/\\\n/g, ' ')
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l !== '' && !l.startsWith('#'));
  const stages: { from: string; name: string | null; steps: { op: string; args: string }[] }[] = [];
  for (const line of lines) {
    const [, op, args] = /^(\w+)\s+(.*)$/.exec(line)!;
    if (op!.toUpperCase() === 'FROM') {
      const m = /^(\S+)(?:\s+AS\s+(\S+))?$/i.exec(args!)!;
      stages.push({ from: m[1]!, name: m[2] ?? null, steps: [] });
    } else stages.at(-1)!.steps.push({ op: op!.toUpperCase(), args: args! });
  }
  return stages;
}

describe('Pro Containerfile', () => {
  const stages = parseContainerfile(readFileSync(path.join(ROOT, 'editions/pro/Containerfile'), 'utf8'));
  const runtime = stages.at(-1)!;
  const pkg = JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as {
    bin: Record<string, string>;
    dependencies: Record<string, string>;
  };

  it('builds in stages on a slim base of a Node LTS line still maintained six months from now', () => {
    // End of life of each Node LTS line, from the Node.js release schedule (github.com/nodejs/Release).
    // Meant to fail six months before the line's end, so the image moves to the next one in time.
    const endOfLife: Record<string, string> = {
      '20': '2026-04-30',
      '22': '2027-04-30',
      '24': '2028-04-30',
    };
    expect(stages.length).toBeGreaterThanOrEqual(2);
    const sixMonthsFromNow = Date.now() + 183 * 86_400_000;
    for (const s of stages) {
      const major = /(?:^|\/)node:(\d+)(?:\.\d+)*-(?:\w+-)?slim$/.exec(s.from)?.[1];
      expect(major, s.from).toBeDefined();
      expect(endOfLife[major!], `node ${major} is an LTS line`).toBeDefined();
      expect(Date.parse(endOfLife[major!]!), `node ${major} maintained six months from now`).toBeGreaterThan(
        sixMonthsFromNow,
      );
    }
  });

  it('copies only paths that exist in the repository, and from stages that exist', () => {
    const names = new Set(stages.map((s) => s.name).filter(Boolean));
    for (const s of stages) {
      for (const step of s.steps.filter((x) => x.op === 'COPY')) {
        const parts = step.args.split(/\s+/);
        const from = parts.find((p) => p.startsWith('--from='));
        const paths = parts.filter((p) => !p.startsWith('--'));
        const sources = paths.slice(0, -1);
        expect(sources.length, step.args).toBeGreaterThan(0);
        if (from) expect(names.has(from.slice('--from='.length)), step.args).toBe(true);
        else for (const src of sources) expect(existsSync(path.join(ROOT, src)), `COPY ${src}`).toBe(true);
      }
    }
  });

  it('brings into the runtime stage everything the server reads at run time', () => {
    const copied = runtime.steps
      .filter((x) => x.op === 'COPY')
      .map((x) =>
        x.args
          .split(/\s+/)
          .filter((p) => !p.startsWith('--'))
          .at(-1)!
          .replace(/^\.\//, '')
          .replace(/\/$/, ''),
      );
    const tsconfig = JSON.parse(readFileSync(path.join(ROOT, 'tsconfig.build.json'), 'utf8')) as {
      compilerOptions: { outDir: string };
    };
    // The compiled code, the command, the edition defaults, the migrations migrate.ts reads, the
    // dependencies, and the vendored driver that node_modules links to.
    for (const need of [
      tsconfig.compilerOptions.outDir,
      'bin',
      'editions',
      'src/db/migrations',
      'node_modules',
      'package.json',
    ])
      expect(copied).toContain(need);
    expect(pkg.dependencies.postgres).toBe('file:vendor/postgres');
    expect(copied).toContain('vendor');
  });

  it('runs the package bin as a non-root numeric user, with `server` and flags the server accepts', () => {
    const workdir = runtime.steps.filter((x) => x.op === 'WORKDIR').at(-1)!.args;
    const user = runtime.steps.filter((x) => x.op === 'USER').at(-1)!.args;
    const [uid, gid] = user.split(':').map(Number);
    expect(uid).toBeGreaterThan(0);
    expect(gid).toBeGreaterThan(0);
    expect(uid).toBe(deployment.spec.template.spec.securityContext.runAsUser);
    const entrypoint = JSON.parse(runtime.steps.find((x) => x.op === 'ENTRYPOINT')!.args) as string[];
    expect(entrypoint).toEqual(['node', path.posix.join(workdir, pkg.bin.leoflow!)]);
    expect(existsSync(path.join(ROOT, pkg.bin.leoflow!))).toBe(true);
    const cmd = JSON.parse(runtime.steps.find((x) => x.op === 'CMD')!.args) as string[];
    expect(cmd[0]).toBe('server');
    const flags = new Set<string>(Object.values(SETTINGS).map((s) => s.flag));
    for (let i = 1; i < cmd.length; i += 2) expect(flags.has(cmd[i]!), cmd[i]).toBe(true);
    // The state directory the Deployment mounts is the Pro default, owned by that user in the image.
    expect(runtime.steps.find((x) => x.op === 'RUN' && x.args.includes(proDefaults.state_dir!))?.args).toContain(
      `chown ${user} ${proDefaults.state_dir}`,
    );
  });
});

describe('the install overlay: its namespace, set once, names the install', () => {
  const kubectl = (() => {
    try {
      execFileSync('kubectl', ['version', '--client'], { stdio: 'ignore' });
      return true;
    } catch {
      return false; // no kubectl here: nothing renders the kustomizations
    }
  })();
  for (const base of ['kubernetes', 'kubernetes-tls']) {
    it.skipIf(!kubectl)(`on ${base}: the control plane in it, the tasks in <it>-tasks, everything that follows`, () => {
      const tmp = mkdtempSync(path.join(tmpdir(), 'leoflow-kustomize-'));
      try {
        for (const dir of ['kubernetes', 'kubernetes-tls', 'install'])
          cpSync(path.join(ROOT, 'editions/pro', dir), path.join(tmp, dir), { recursive: true });
        // What `kustomize edit set namespace team-a` writes (kubectl has no `edit`).
        const k = path.join(tmp, 'install', 'kustomization.yaml');
        const text = readFileSync(k, 'utf8');
        expect(text).toMatch(/^namespace: leoflow$/m);
        writeFileSync(
          k,
          text.replace(/^namespace: leoflow$/m, 'namespace: team-a').replace('- ../kubernetes\n', `- ../${base}\n`),
        );
        const built = parseAllDocuments(
          execFileSync('kubectl', ['kustomize', path.join(tmp, 'install')], { encoding: 'utf8' }),
        ).map((d) => d.toJS() as Obj);
        for (const o of built)
          expect(o.metadata.namespace, `${o.kind}/${o.metadata.name}`).toBe(
            ['Role', 'RoleBinding'].includes(o.kind) ? 'team-a-tasks' : 'team-a',
          );
        const binding = built.find((o) => o.kind === 'RoleBinding')!;
        expect(binding.subjects).toEqual([{ kind: 'ServiceAccount', name: 'leoflow', namespace: 'team-a' }]);
        const cm = built.find((o) => o.kind === 'ConfigMap')!;
        expect(cm.data.LEOFLOW_KUBERNETES_NAMESPACE).toBe('team-a-tasks');
        expect(cm.data.LEOFLOW_POD_SERVER_URL).toMatch(/^https?:\/\/leoflow\.team-a\.svc:7070$/);
        const d = built.find((o) => o.kind === 'Deployment')!;
        const c = d.spec.template.spec.containers[0];
        expect((c.env as Obj[]).find((e) => e.name === SETTINGS.kubernetes_image.env)?.value).toBe(c.image);
        if (base === 'kubernetes') {
          // As a replica of it compiles it: tasks in their own namespace, never the control plane's.
          const config = deployedConfig(c, cm, (v) => v, d.metadata.namespace);
          expect(config.kubernetes).toMatchObject({ namespace: 'team-a-tasks', controlPlaneNamespace: 'team-a' });
        }
      } finally {
        rmSync(tmp, { recursive: true, force: true });
      }
    });
  }
});
