import { mkdtempSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { V1Pod } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { apiVerdict } from '../../src/executors/kubernetes/api-error.js';
import { loadKubeConfig } from '../../src/executors/kubernetes/load-kube-config.js';
import { podCondition } from '../../src/executors/kubernetes/pod-condition.js';
import { attemptOfPod, labelValue, podLabels, podName } from '../../src/core/pod-identity.js';
import { dns1123LabelProblem, labelValueProblem, parseQuantity } from '../../src/core/kubernetes-names.js';
import { unschedulablePodStatus } from '../helpers/fake-kube/test-executor.js';

const id = {
  dagId: 'etl',
  runId: '12',
  taskId: 'load',
  tiId: '345',
  tryNumber: 1,
  attemptToken: '0b9c2c39-4f1e-4a51-9b7e-3d2f0c9a1e11',
};

describe('pod names and labels', () => {
  it('names each attempt with a valid DNS-1123 label, the same every time, another for each try', () => {
    const name = podName(id);
    expect(name).toMatch(/^lf-etl-load-[0-9a-f]{12}$/);
    expect(podName(id)).toBe(name);
    expect(podName({ ...id, tryNumber: 2 })).not.toBe(name);
  });

  it('names another attempt of the same ids (a database reset starts ids again) another pod, with no trace of the token', () => {
    const other = podName({ ...id, attemptToken: 'f3a1e0d2-7c55-4d0e-8a3b-1e2f4a5b6c7d' });
    expect(other).not.toBe(podName(id));
    expect(other).toMatch(/^lf-etl-load-[0-9a-f]{12}$/);
    expect(podName(id)).not.toContain(id.attemptToken.slice(0, 8));
  });

  it('tells ids that contain "-" apart (a-1 + x is not a + 1-x)', () => {
    const a = podName({ ...id, dagId: 'a-1', taskId: 'x' });
    const b = podName({ ...id, dagId: 'a', taskId: '1-x' });
    expect(a).not.toBe(b);
  });

  it('stays within 63 characters and the DNS-1123 alphabet for any id', () => {
    for (const dagId of ['A'.repeat(100), 'Upper_Case.dots', '-', '9'.repeat(100), 'x']) {
      const n = podName({ ...id, dagId, taskId: 'T_' + 'b'.repeat(98) });
      expect(dns1123LabelProblem(n), n).toBeNull();
    }
  });

  it('makes label values valid: ids kept when they are, cut with a hash when too long or ending badly', () => {
    expect(labelValue('etl')).toBe('etl');
    const long = labelValue('d'.repeat(100));
    expect(labelValueProblem(long)).toBeNull();
    expect(long).not.toBe(labelValue('d'.repeat(99)));
    expect(labelValueProblem(labelValue('ends.with.'))).toBeNull();
    const labels = podLabels({ ...id, dagId: 'x'.repeat(100) });
    for (const v of Object.values(labels)) expect(labelValueProblem(v)).toBeNull();
    expect(attemptOfPod(labels)).toEqual({ tiId: '345', tryNumber: 1 });
    expect(attemptOfPod({ 'leoflow.io/ti-id': '345' })).toBeNull();
  });
});

describe('resource quantities', () => {
  it('reads the forms Kubernetes accepts, and nothing else', () => {
    expect(parseQuantity('500m')).toBe(0.5);
    expect(parseQuantity('2')).toBe(2);
    expect(parseQuantity('4Gi')).toBe(4 * 2 ** 30);
    expect(parseQuantity('1e3')).toBe(1000);
    expect(parseQuantity('1.5G')).toBe(1.5e9);
    for (const bad of ['', '-1', '2x', 'Gi', '1 Gi', '1gi']) expect(parseQuantity(bad), bad).toBeNull();
  });
});

const pod = (status: V1Pod['status']): V1Pod => ({ metadata: { name: 'p' }, status });
const waiting = (reason: string, message?: string) =>
  pod({
    phase: 'Pending',
    containerStatuses: [
      { name: 'task', image: 'i', imageID: '', ready: false, restartCount: 0, state: { waiting: { reason, message } } },
    ],
  });

describe('what a pod status means', () => {
  it('fails at once on the reasons no wait will cure, with the message', () => {
    for (const r of ['InvalidImageName', 'CreateContainerConfigError']) {
      expect(podCondition(waiting(r, 'because'))).toEqual({ kind: 'cannot-start', reason: `${r}:because` });
    }
    expect(podCondition(waiting('ContainerCreating'))).toEqual({
      kind: 'pending',
      reason: 'POD_PENDING:ContainerCreating',
      unschedulable: false,
    });
  });

  it("fails a pull at once only when the registry's answer, as the kubelet quotes it, is for good", () => {
    // containerd's messages, as kubelets report them in the container's waiting state.
    const ref = 'docker.io/acme/etl:1.4';
    const forGood = [
      `rpc error: code = NotFound desc = failed to pull and unpack image "${ref}": failed to resolve reference "${ref}": ${ref}: not found`,
      `failed to pull and unpack image "${ref}": failed to resolve reference "${ref}": pull access denied, repository does not exist or may require authorization: server message: insufficient_scope: authorization failed`,
      `failed to pull and unpack image "${ref}": failed to resolve reference "${ref}": failed to authorize: failed to fetch anonymous token: unexpected status: 401 Unauthorized`,
    ];
    for (const m of forGood)
      for (const r of ['ErrImagePull', 'ImagePullBackOff'])
        expect(podCondition(waiting(r, m)).kind, `${r}: ${m}`).toBe('cannot-start');
    const passing = [
      `rpc error: code = Unknown desc = failed to pull and unpack image "${ref}": failed to copy: httpReadSeeker: failed open: unexpected status code https://registry-1.docker.io/v2/acme/etl/manifests/sha256:8d0bff43: 429 Too Many Requests - Server message: toomanyrequests: You have reached your pull rate limit. You may increase the limit by authenticating and upgrading: https://www.docker.com/increase-rate-limit`,
      `failed to pull and unpack image "${ref}": failed to resolve reference "${ref}": failed to do request: Head "https://registry-1.docker.io/v2/acme/etl/manifests/1.4": dial tcp 54.227.20.253:443: i/o timeout`,
      `Back-off pulling image "${ref}"`,
    ];
    for (const m of passing)
      expect(podCondition(waiting('ErrImagePull', m)), m).toEqual({
        kind: 'pending',
        reason: expect.stringMatching(/^POD_PENDING:ErrImagePull:/),
        unschedulable: false,
      });
  });

  it('says why an unscheduled pod waits, from its PodScheduled condition', () => {
    const p = pod(unschedulablePodStatus('0/3 nodes are available: 3 Insufficient cpu.'));
    expect(podCondition(p)).toEqual({
      kind: 'pending',
      reason: 'POD_PENDING:Unschedulable:0/3 nodes are available: 3 Insufficient cpu.',
      unschedulable: true,
    });
    expect(podCondition(pod({ phase: 'Pending' }))).toEqual({ kind: 'pending', reason: null, unschedulable: false });
  });

  it("reads running, succeeded, failed (with the container's reason) and a lost node", () => {
    expect(podCondition(pod({ phase: 'Running' }))).toEqual({ kind: 'running' });
    expect(podCondition(pod({ phase: 'Succeeded' }))).toEqual({ kind: 'succeeded' });
    const oom = pod({
      phase: 'Failed',
      containerStatuses: [
        {
          name: 'task',
          image: 'i',
          imageID: '',
          ready: false,
          restartCount: 0,
          state: { terminated: { exitCode: 137, reason: 'OOMKilled' } },
        },
      ],
    });
    expect(podCondition(oom)).toEqual({ kind: 'failed', reason: 'OOMKilled:exit code 137' });
    expect(
      podCondition(pod({ phase: 'Failed', reason: 'Evicted', message: 'The node was low on resource: memory.' })),
    ).toEqual({ kind: 'failed', reason: 'Evicted:The node was low on resource: memory.' });
    expect(podCondition(pod({ phase: 'Unknown' })).kind).toBe('lost');
    expect(podCondition(pod({ phase: 'Running', reason: 'NodeLost', message: 'Node n1 is unresponsive' }))).toEqual({
      kind: 'lost',
      reason: 'NodeLost:Node n1 is unresponsive',
    });
  });
});

describe('what an API answer to a create means', () => {
  const err = (code: number, body: object, headers: Record<string, string> = {}) => ({
    code,
    body: JSON.stringify(body),
    headers,
  });
  it('takes AlreadyExists as success, refuses for good on 403/404/422 and quota, retries 429/5xx and no answer', () => {
    expect(apiVerdict(err(409, { reason: 'AlreadyExists' }))).toEqual({ kind: 'exists' });
    expect(
      apiVerdict(
        err(403, { reason: 'Forbidden', message: 'pods is forbidden: User "x" cannot create resource "pods"' }),
      ),
    ).toMatchObject({ kind: 'refused', code: 403, reason: 'Forbidden' });
    expect(
      apiVerdict(
        err(403, { reason: 'Forbidden', message: 'pods "p" is forbidden: exceeded quota: q, requested: cpu=2' }),
      ),
    ).toMatchObject({ kind: 'refused', reason: 'QuotaExceeded' });
    expect(apiVerdict(err(404, { reason: 'NotFound', message: 'namespaces "x" not found' }))).toEqual({
      kind: 'refused',
      code: 404,
      reason: 'NotFound',
      message: 'namespaces "x" not found',
    });
    expect(apiVerdict(err(422, { reason: 'Invalid', message: 'bad' }))).toMatchObject({
      kind: 'refused',
      reason: 'Invalid',
    });
    expect(apiVerdict(err(429, { reason: 'TooManyRequests' }, { 'retry-after': '3' }))).toEqual({
      kind: 'retry',
      reason: 'TooManyRequests',
      afterMs: 3000,
      message: '',
    });
    expect(apiVerdict(err(503, {}))).toMatchObject({ kind: 'retry', reason: 'InternalError', afterMs: null });
    expect(apiVerdict(new Error('connect ECONNREFUSED 127.0.0.1:1'))).toMatchObject({
      kind: 'retry',
      reason: 'Unreachable',
    });
  });
});

describe('kubeconfig sources', () => {
  it('reads the service account of a pod in-cluster: its token, CA and $KUBERNETES_SERVICE_HOST', () => {
    const root = mkdtempSync(path.join(os.tmpdir(), 'leoflow-sa-'));
    const dir = path.join(root, 'var/run/secrets/kubernetes.io/serviceaccount');
    mkdirSync(dir, { recursive: true });
    writeFileSync(path.join(dir, 'token'), 'sa-token');
    writeFileSync(path.join(dir, 'ca.crt'), 'ca');
    writeFileSync(path.join(dir, 'namespace'), 'leoflow');
    const saved = { host: process.env.KUBERNETES_SERVICE_HOST, port: process.env.KUBERNETES_SERVICE_PORT };
    try {
      process.env.KUBERNETES_SERVICE_HOST = '10.0.0.1';
      process.env.KUBERNETES_SERVICE_PORT = '443';
      const kc = loadKubeConfig({ kind: 'in-cluster' }, root);
      expect(kc.getCurrentCluster()!.server).toBe('https://10.0.0.1:443');
      delete process.env.KUBERNETES_SERVICE_HOST;
      expect(() => loadKubeConfig({ kind: 'in-cluster' }, root)).toThrow(
        'kubeconfig (in-cluster): KUBERNETES_SERVICE_HOST is not set: this process does not run in a pod',
      );
    } finally {
      if (saved.host === undefined) delete process.env.KUBERNETES_SERVICE_HOST;
      else process.env.KUBERNETES_SERVICE_HOST = saved.host;
      if (saved.port === undefined) delete process.env.KUBERNETES_SERVICE_PORT;
      else process.env.KUBERNETES_SERVICE_PORT = saved.port;
      rmSync(root, { recursive: true, force: true });
    }
    expect(() => loadKubeConfig({ kind: 'file', path: '/nonexistent/kubeconfig' })).toThrow(
      /^kubeconfig \(\/nonexistent\/kubeconfig\): /,
    );
  });
});

describe('a node lost as Kubernetes 1.27+ reports it', () => {
  const runningContainer = {
    name: 'task',
    ready: true,
    restartCount: 0,
    image: 'x',
    imageID: '',
    state: { running: { startedAt: new Date() } },
  };
  it('is read from DisruptionTarget or from Ready=False over containers last seen running and ready', () => {
    expect(
      podCondition({
        status: {
          phase: 'Running',
          conditions: [{ type: 'Ready', status: 'False' }],
          containerStatuses: [runningContainer],
        },
      }),
    ).toEqual({ kind: 'lost', reason: expect.stringMatching(/^NodeNotReady:/) });
    expect(
      podCondition({
        status: {
          phase: 'Running',
          conditions: [
            {
              type: 'DisruptionTarget',
              status: 'True',
              reason: 'DeletionByTaintManager',
              message: 'Taint manager: deleting due to NoExecute taint',
            },
          ],
          containerStatuses: [runningContainer],
        },
      }),
    ).toEqual({ kind: 'lost', reason: 'DeletionByTaintManager:Taint manager: deleting due to NoExecute taint' });
  });
  it("is not read from a kubelet's own Ready=False (a container not ready)", () => {
    const notReady = { ...runningContainer, ready: false };
    expect(
      podCondition({
        status: {
          phase: 'Running',
          conditions: [{ type: 'Ready', status: 'False', reason: 'ContainersNotReady' }],
          containerStatuses: [notReady],
        },
      }),
    ).toEqual({ kind: 'running' });
  });
  it('is read from a deletion no kubelet confirms: still there 10 s past its grace period, phase Running', () => {
    const deleting = (deletionTimestamp: string) => ({
      metadata: { name: 'p1', deletionTimestamp: new Date(deletionTimestamp) },
      spec: { nodeName: 'node-7', containers: [] },
      status: { phase: 'Running', containerStatuses: [runningContainer] },
    });
    const now = Date.parse('2026-01-01T00:01:00Z');
    expect(podCondition(deleting('2026-01-01T00:00:55Z'), now), 'within its grace: the kubelet may confirm').toEqual({
      kind: 'running',
    });
    expect(podCondition(deleting('2026-01-01T00:00:49Z'), now)).toEqual({
      kind: 'lost',
      reason:
        'DeletionNotConfirmed:pod p1 is still there 11s after its grace period ended: no kubelet on node node-7 confirms its deletion',
    });
    const failed = { ...deleting('2026-01-01T00:00:00Z'), status: { phase: 'Failed' } };
    expect(podCondition(failed, now).kind, 'a pod its kubelet ended is not lost').toBe('failed');
  });
});

describe('sidecars: the task container’s end is the attempt’s end', () => {
  const term = (exitCode: number, reason = exitCode === 0 ? 'Completed' : 'Error') => ({
    terminated: { exitCode, reason, startedAt: new Date(), finishedAt: new Date() },
  });
  const sidecarRunning = {
    name: 'istio-proxy',
    ready: true,
    restartCount: 0,
    image: 'proxy',
    imageID: '',
    state: { running: { startedAt: new Date() } },
  };
  const taskStatus = (state: object) => ({
    name: 'task',
    ready: false,
    restartCount: 0,
    image: 'x',
    imageID: '',
    state,
  });
  it('reads the task container’s end while an injected sidecar keeps the pod Running', () => {
    const pod = (state: object) => ({
      status: { phase: 'Running', containerStatuses: [taskStatus(state), sidecarRunning] },
    });
    expect(podCondition(pod(term(0)))).toEqual({ kind: 'succeeded' });
    expect(podCondition(pod(term(1)))).toEqual({ kind: 'failed', reason: 'Error:exit code 1' });
    expect(podCondition(pod({ running: { startedAt: new Date() } }))).toEqual({ kind: 'running' });
  });
  it('gives the task container’s reason, not a native sidecar’s (stopped by the kubelet after it)', () => {
    expect(
      podCondition({
        status: {
          phase: 'Failed',
          initContainerStatuses: [{ ...sidecarRunning, ready: false, state: term(143) }],
          containerStatuses: [taskStatus(term(3))],
        },
      }),
    ).toEqual({ kind: 'failed', reason: 'Error:exit code 3' });
  });
});
