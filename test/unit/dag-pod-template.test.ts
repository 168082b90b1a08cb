import { describe, expect, it } from 'vitest';
import type { Attempt } from '../../src/core/attempt.js';
import { parseDag } from '../../src/core/dag/parse-dag.js';
import { DagValidationError, type KubernetesSpec } from '../../src/core/dag-spec.js';
import { podManifest } from '../../src/executors/kubernetes/pod-manifest.js';
import { templateSettings } from '../helpers/pod-template-settings.js';
import { parsePodTemplate } from '../../src/executors/kubernetes/pod-template.js';
import { podSecurityViolations } from '../helpers/fake-kube/pod-security.js';

/** A task's own `kubernetes.pod_template`: checked at apply, and laid over the server's on its pods. */

const dag = (block: string) =>
  `dag_id: k\ntasks:\n  - id: t\n    executor: kubernetes\n    command: [x]\n    kubernetes:\n${block}`;

function kubernetesOf(text: string): KubernetesSpec {
  return parseDag(text, 'k.yaml').tasks[0]!.kubernetes!;
}

function issuesOf(text: string): { path: string; message: string }[] {
  try {
    parseDag(text, 'k.yaml');
  } catch (err) {
    if (err instanceof DagValidationError) return err.issues.map((i) => ({ path: i.path, message: i.message }));
    throw err;
  }
  throw new Error('accepted');
}

const settings = templateSettings();

function attemptWith(kubernetes: KubernetesSpec): Attempt {
  return {
    ...{ tiId: '7', runId: '3', dagId: 'k', taskId: 't', tryNumber: 1, maxTries: 1 },
    ...{ attemptToken: 'tok', dispatchKey: 'd', command: ['x'], env: {}, cwd: null, timeoutMs: null },
    pod: { image: null, kubernetes },
  };
}

const TASK_BLOCK = `      pod_template:
        metadata: { labels: { team: ml }, annotations: { note: "gpu job" } }
        spec:
          priorityClassName: batch-high
          affinity: { nodeAffinity: { requiredDuringSchedulingIgnoredDuringExecution: { nodeSelectorTerms: [{ matchExpressions: [{ key: gpu, operator: Exists }] }] } } }
          imagePullSecrets: [{ name: ml-registry }]
          volumes: [{ name: scratch, emptyDir: {} }]
          containers: [{ name: task, volumeMounts: [{ name: scratch, mountPath: /scratch }] }]
`;

describe("a DAG task's pod_template", () => {
  it('is taken at apply and laid over the server-wide template on the pod', () => {
    const k = kubernetesOf(dag(TASK_BLOCK));
    const server = parsePodTemplate(`
metadata: { labels: { team: data, env: prod } }
spec:
  priorityClassName: batch-low
  volumes: [{ name: scratch, hostPath: { path: /mnt } }, { name: certs, secret: { secretName: c } }]
  containers: [{ name: task, volumeMounts: [{ name: certs, mountPath: /certs }] }]
`);
    const pod = podManifest(attemptWith(k), { ...settings, podTemplate: server });
    expect(pod.metadata!.labels).toMatchObject({ team: 'ml', env: 'prod' });
    expect(pod.metadata!.annotations).toMatchObject({ note: 'gpu job' });
    expect(pod.spec!.priorityClassName).toBe('batch-high');
    expect(pod.spec!.imagePullSecrets).toEqual([{ name: 'ml-registry' }]);
    expect(pod.spec!.affinity?.nodeAffinity).toBeDefined();
    // The task's `scratch` replaces the server's (a hostPath) of the same name; the server's certs stay.
    expect(pod.spec!.volumes).toEqual([
      { name: 'certs', secret: { secretName: 'c' } },
      { name: 'scratch', emptyDir: {} },
    ]);
    expect(pod.spec!.containers[0]!.volumeMounts).toEqual([
      { name: 'certs', mountPath: '/certs' },
      { name: 'scratch', mountPath: '/scratch' },
    ]);
    // Leoflow's own labels and the restricted defaults are untouched.
    expect(pod.metadata!.labels!['leoflow.io/install']).toBe('i1');
    expect(podSecurityViolations(pod, 'restricted')).toEqual([]);
  });

  it('works without a server template, and a pod without either is unchanged', () => {
    const k = kubernetesOf(dag(TASK_BLOCK));
    expect(podManifest(attemptWith(k), settings).spec!.priorityClassName).toBe('batch-high');
    const plain = podManifest(attemptWith({}), settings);
    expect(plain.spec!.priorityClassName).toBeUndefined();
    expect(plain.metadata!.labels!.team).toBeUndefined();
  });

  it('a securityContext it gives replaces the restricted default, and admission says so', () => {
    const k = kubernetesOf(
      dag(
        '      pod_template:\n        spec:\n          containers: [{ name: task, securityContext: { privileged: true } }]\n',
      ),
    );
    const pod = podManifest(attemptWith(k), settings);
    expect(pod.spec!.containers[0]!.securityContext).toEqual({ privileged: true });
    expect(podSecurityViolations(pod, 'restricted').join('\n')).toMatch(/privileged/);
  });

  it('is refused at apply with the field at fault', () => {
    const at = 'tasks[0].kubernetes.pod_template';
    expect(issuesOf(dag('      pod_template: { spec: { hostNetwork: true } }\n'))).toEqual([
      {
        path: at,
        message:
          'spec.hostNetwork is not taken from a pod template (allowed: affinity, priorityClassName, ' +
          'imagePullSecrets, volumes, securityContext, containers)',
      },
    ]);
    expect(issuesOf(dag('      pod_template: { metadata: { labels: { leoflow.io/ti-id: "1" } } }\n'))).toEqual([
      { path: at, message: 'metadata.labels.leoflow.io/ti-id: Leoflow sets this key itself' },
    ]);
    expect(
      issuesOf(
        dag(
          '      pod_template: { spec: { containers: [{ name: task, volumeMounts: [{ name: v, mountPath: /v }] }] } }\n',
        ),
      ),
    ).toEqual([{ path: at, message: 'spec.containers[0].volumeMounts[0]: no volume "v" in spec.volumes' }]);
    expect(issuesOf(dag('      pod_template: [1]\n'))).toEqual([
      { path: at, message: 'must be a partial Pod (an object with metadata and/or spec)' },
    ]);
  });
});
