import { execFileSync } from 'node:child_process';
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { parseAllDocuments } from 'yaml';
import { SETTINGS } from '../../src/server/config/settings.js';
import { deployedConfig, hasKubectl, kustomization, type Obj, ROOT } from '../helpers/pro-manifests.js';

describe('the image set once, as `kustomize edit set image` does, in either overlay', () => {
  const kubectl = hasKubectl();
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

describe('the install overlay: its namespace, set once, names the install', () => {
  const kubectl = hasKubectl();
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
