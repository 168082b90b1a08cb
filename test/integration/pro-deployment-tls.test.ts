import { execFileSync } from 'node:child_process';
import { copyFileSync, mkdtempSync, readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { parseAllDocuments } from 'yaml';
import { SETTINGS } from '../../src/server/config/settings.js';
import {
  container,
  deployedConfig,
  kustomization,
  manifests,
  type Obj,
  ofKind,
  one,
  ROOT,
} from '../helpers/pro-manifests.js';
import { makeTestPki, type TestPki } from '../helpers/test-certs.js';

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
