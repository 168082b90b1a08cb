/** parseDag on a task's kubernetes block. */
import { describe, expect, it } from 'vitest';

import { parseDag } from '../../src/core/dag/parse-dag.js';
import { FILE, dag, issuesOf } from '../helpers/dag-sources.js';

describe('parseDag: the kubernetes block', () => {
  it("reads DESIGN.md's example, keeping only the fields given", () => {
    const spec = parseDag(
      dag(`executor: kubernetes
kubernetes:
  image: ghcr.io/acme/train:1.4
  resources: { requests: { cpu: "2", memory: 4Gi }, limits: { memory: 8Gi, nvidia.com/gpu: 1 } }
  namespace: ml
  service_account: trainer
  node_selector: { pool: gpu, kubernetes.io/arch: amd64 }
  tolerations: [{ key: gpu, operator: Exists, effect: NoSchedule }, { key: spot, value: "true", effect: NoExecute, toleration_seconds: 30 }]`),
      FILE,
    );
    expect(spec.tasks[0]!.kubernetes).toEqual({
      image: 'ghcr.io/acme/train:1.4',
      resources: { requests: { cpu: '2', memory: '4Gi' }, limits: { memory: '8Gi', 'nvidia.com/gpu': '1' } },
      namespace: 'ml',
      serviceAccount: 'trainer',
      nodeSelector: { pool: 'gpu', 'kubernetes.io/arch': 'amd64' },
      tolerations: [
        { key: 'gpu', operator: 'Exists', effect: 'NoSchedule' },
        { key: 'spot', value: 'true', effect: 'NoExecute', tolerationSeconds: 30 },
      ],
    });
    expect(parseDag(dag('kubernetes: { namespace: ml }'), FILE).tasks[0]!.kubernetes).toEqual({ namespace: 'ml' });
  });

  it('leaves the field out of a task without the block (its spec and hash unchanged)', () => {
    expect(Object.hasOwn(parseDag(dag(''), FILE).tasks[0]!, 'kubernetes')).toBe(false);
    expect(Object.hasOwn(parseDag(dag('kubernetes: null'), FILE).tasks[0]!, 'kubernetes')).toBe(false);
  });

  it.each([
    [
      'kubernetes: gpu',
      'tasks[0].kubernetes',
      'expected a kubernetes mapping (image, resources, namespace, service_account, node_selector, tolerations, pod_template), got "gpu"',
    ],
    [
      'kubernetes: { imag: x }',
      'tasks[0].kubernetes.imag',
      'unknown key "imag" (did you mean "image"?); allowed keys: image, resources, namespace, service_account, node_selector, tolerations, pod_template',
    ],
    [
      'kubernetes: { image: "a b" }',
      'tasks[0].kubernetes.image',
      'must be an image reference without spaces, got "a b"',
    ],
    [
      'kubernetes: { namespace: ML }',
      'tasks[0].kubernetes.namespace',
      'must be a DNS-1123 label: lower-case letters, digits and "-", starting and ending with a letter or digit, got "ML"',
    ],
    [
      'kubernetes: { service_account: "a_b" }',
      'tasks[0].kubernetes.service_account',
      'must be a DNS-1123 subdomain: lower-case letters, digits, "-" and ".", starting and ending with a letter or digit, got "a_b"',
    ],
    [
      'kubernetes: { resources: { requests: { cpu: 2x } } }',
      'tasks[0].kubernetes.resources.requests.cpu',
      'expected a resource quantity such as 500m, 2, 512Mi or 4Gi, got "2x"',
    ],
    [
      'kubernetes: { resources: { requests: { memory: -1Gi } } }',
      'tasks[0].kubernetes.resources.requests.memory',
      'expected a resource quantity such as 500m, 2, 512Mi or 4Gi, got "-1Gi"',
    ],
    [
      'kubernetes: { resources: { request: { cpu: "1" } } }',
      'tasks[0].kubernetes.resources.request',
      'unknown key "request" (did you mean "requests"?); allowed keys: requests, limits',
    ],
    [
      'kubernetes: { resources: { requests: { memory: 2Gi }, limits: { memory: 1Gi } } }',
      'tasks[0].kubernetes.resources.requests.memory',
      'request 2Gi is above its limit 1Gi',
    ],
    [
      'kubernetes: { node_selector: { "-pool": gpu } }',
      'tasks[0].kubernetes.node_selector["-pool"]',
      'invalid label key "-pool": name part must be letters, digits, "-", "_" and ".", starting and ending with a letter or digit',
    ],
    [
      'kubernetes: { node_selector: { "Acme.io/pool": gpu } }',
      'tasks[0].kubernetes.node_selector["Acme.io/pool"]',
      'invalid label key "Acme.io/pool": prefix "Acme.io" must be a DNS-1123 subdomain: lower-case letters, digits, "-" and ".", starting and ending with a letter or digit',
    ],
    [
      'kubernetes: { node_selector: { pool: "a b" } }',
      'tasks[0].kubernetes.node_selector.pool',
      'invalid label value "a b": must be letters, digits, "-", "_" and ".", starting and ending with a letter or digit',
    ],
    [
      'kubernetes: { node_selector: { pool: 1 } }',
      'tasks[0].kubernetes.node_selector.pool',
      'expected a string, got 1 (quote it: "1")',
    ],
    [
      'kubernetes: { tolerations: { key: gpu } }',
      'tasks[0].kubernetes.tolerations',
      'expected a list of tolerations, got a mapping',
    ],
    [
      'kubernetes: { tolerations: [{ key: gpu, effect: NoSchedul }] }',
      'tasks[0].kubernetes.tolerations[0].effect',
      'expected one of NoSchedule, PreferNoSchedule, NoExecute, got "NoSchedul" (did you mean "NoSchedule"?)',
    ],
    [
      'kubernetes: { tolerations: [{ key: gpu, operator: Exists, value: x }] }',
      'tasks[0].kubernetes.tolerations[0].value',
      'must be empty when operator is Exists',
    ],
    [
      'kubernetes: { tolerations: [{ key: gpu, effect: NoSchedule, toleration_seconds: 5 }] }',
      'tasks[0].kubernetes.tolerations[0].toleration_seconds',
      'is only allowed with effect NoExecute',
    ],
    [
      'kubernetes: { tolerations: [{ key: gpu, tolerate: 5 }] }',
      'tasks[0].kubernetes.tolerations[0].tolerate',
      'unknown key "tolerate"; allowed keys: key, operator, value, effect, toleration_seconds',
    ],
  ])('rejects a bad kubernetes field: %s', (line, path, message) => {
    expect(issuesOf(dag(line))).toEqual([{ path, message }]);
  });
});
