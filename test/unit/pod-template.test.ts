import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import type { Attempt } from '../../src/core/attempt.js';
import { podManifest } from '../../src/executors/kubernetes/pod-manifest.js';
import { templateSettings } from '../helpers/pod-template-settings.js';
import { parsePodTemplate } from '../../src/executors/kubernetes/pod-template.js';
import { loadConfig } from '../../src/server/config/load-config.js';
import { podSecurityViolations } from '../helpers/fake-kube/pod-security.js';

const attempt: Attempt = {
  tiId: '7',
  runId: '3',
  dagId: 'etl',
  taskId: 'load',
  tryNumber: 1,
  maxTries: 1,
  attemptToken: 'tok',
  dispatchKey: 'k',
  command: ['true'],
  env: {},
  cwd: null,
  timeoutMs: null,
};
const settings = templateSettings({ podCa: { kind: 'secret', name: 'ca', key: 'ca.crt' } });

const TEMPLATE = `
metadata:
  labels: { team: data }
  annotations: { cost-center: "42" }
spec:
  priorityClassName: batch-low
  imagePullSecrets: [{ name: regcred }]
  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms: [{ matchExpressions: [{ key: pool, operator: In, values: [etl] }] }]
  volumes: [{ name: scratch, emptyDir: { sizeLimit: 1Gi } }]
  containers:
    - name: task
      volumeMounts: [{ name: scratch, mountPath: /scratch }]
`;

describe('task pods', () => {
  it('pass Pod Security restricted by default', () => {
    const pod = podManifest(attempt, settings);
    expect(podSecurityViolations(pod, 'restricted')).toEqual([]);
  });

  it('get what the pod template adds, and keep their own labels, volumes and restricted settings', () => {
    const pod = podManifest(attempt, { ...settings, podTemplate: parsePodTemplate(TEMPLATE) });
    expect(pod.metadata!.labels).toMatchObject({ team: 'data', 'leoflow.io/install': 'i1', 'leoflow.io/ti-id': '7' });
    expect(pod.metadata!.annotations).toMatchObject({ 'cost-center': '42', 'leoflow.io/dag-id': 'etl' });
    expect(pod.spec).toMatchObject({ priorityClassName: 'batch-low', imagePullSecrets: [{ name: 'regcred' }] });
    expect(pod.spec!.affinity!.nodeAffinity).toBeDefined();
    expect(pod.spec!.volumes!.map((v) => v.name)).toEqual(['leoflow-ca', 'scratch']);
    expect(pod.spec!.containers[0]!.volumeMounts!.map((m) => m.mountPath)).toEqual(['/etc/leoflow/ca', '/scratch']);
    expect(podSecurityViolations(pod, 'restricted')).toEqual([]);
  });

  it('may replace the securityContext (e.g. a fixed uid for another image)', () => {
    const pod = podManifest(attempt, {
      ...settings,
      podTemplate: parsePodTemplate(
        'spec:\n  securityContext: { runAsNonRoot: true, runAsUser: 2000, seccompProfile: { type: RuntimeDefault } }\n',
      ),
    });
    expect(pod.spec!.securityContext).toEqual({
      runAsNonRoot: true,
      runAsUser: 2000,
      seccompProfile: { type: 'RuntimeDefault' },
    });
  });
});

describe('pod templates', () => {
  it('refuse what they cannot carry, naming the field', () => {
    const bad: [string, string][] = [
      [
        'spec:\n  hostNetwork: true\n',
        'spec.hostNetwork is not taken from a pod template (allowed: affinity, priorityClassName, imagePullSecrets, volumes, securityContext, containers)',
      ],
      [
        'metadata:\n  labels: { leoflow.io/install: x }\n',
        'metadata.labels.leoflow.io/install: Leoflow sets this key itself',
      ],
      ['metadata:\n  labels: { team: "a b" }\n', 'metadata.labels.team: '],
      [
        'spec:\n  containers: [{ name: sidecar }]\n',
        'spec.containers[0].name must be "task" (the one container of a task pod), got "sidecar"',
      ],
      [
        'spec:\n  containers: [{ name: task, volumeMounts: [{ name: x, mountPath: /x }] }]\n',
        'spec.containers[0].volumeMounts[0]: no volume "x" in spec.volumes',
      ],
      [
        'spec:\n  volumes: [{ name: leoflow-ca, emptyDir: {} }]\n',
        'spec.volumes[0].name: names starting with "leoflow-" are Leoflow\'s own',
      ],
      ['spec:\n  imagePullSecrets: regcred\n', 'spec.imagePullSecrets must be a list'],
      ['[1, 2]', 'must be a partial Pod (an object with metadata and/or spec)'],
    ];
    for (const [text, error] of bad) expect(() => parsePodTemplate(text), text).toThrow(error);
  });

  const dir = mkdtempSync(join(tmpdir(), 'leoflow-pod-template-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('are read from --pod-template / LEOFLOW_POD_TEMPLATE at startup, a bad one refusing to start with the file and field', () => {
    writeFileSync(join(dir, 'good.yaml'), TEMPLATE);
    writeFileSync(join(dir, 'bad.yaml'), 'spec:\n  hostPID: true\n');
    const base = { executor: 'kubernetes', kubernetes_image: 'leoflow:1', pod_server_url: 'http://cp:7070' };
    expect(loadConfig({ ...base, pod_template: 'good.yaml' }, {}, dir).kubernetes!.podTemplate).toMatchObject({
      priorityClassName: 'batch-low',
    });
    expect(
      loadConfig(base, { LEOFLOW_POD_TEMPLATE: join(dir, 'good.yaml') }, '/').kubernetes!.podTemplate,
    ).toMatchObject({ labels: { team: 'data' } });
    expect(loadConfig(base, {}, dir).kubernetes!.podTemplate).toBeNull();
    expect(() => loadConfig({ ...base, pod_template: 'bad.yaml' }, {}, dir)).toThrow(
      `--pod-template: ${join(dir, 'bad.yaml')}: spec.hostPID is not taken from a pod template`,
    );
    expect(() => loadConfig({ ...base, pod_template: 'none.yaml' }, {}, dir)).toThrow(
      `--pod-template: cannot read ${join(dir, 'none.yaml')}: ENOENT`,
    );
  });
});
