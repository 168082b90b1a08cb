import { execFileSync } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parseAllDocuments } from 'yaml';
import { SETTINGS } from '../../src/server/config/settings.js';
import { createMetrics } from '../../src/server/observability/metrics.js';
import { serveMetrics } from '../../src/server/observability/serve-metrics.js';
import {
  configMap,
  container,
  deployedConfig,
  deployment,
  DIR,
  kustomization,
  manifests,
  type Obj,
  ofKind,
  one,
  pod,
  proDefaults,
} from '../helpers/pro-manifests.js';

/**
 * The Pro deployment (`editions/pro/kubernetes/`, `editions/pro/Containerfile`) read as Kubernetes
 * and a container builder would, and checked against the code it deploys: the probes hit the
 * endpoints and port the server serves, the container's flags and environment are accepted by the
 * real configuration code, RBAC stays in one namespace without wildcards, and the image runs the
 * real entry point as a non-root user. (No cluster and no container engine run here.)
 */

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
