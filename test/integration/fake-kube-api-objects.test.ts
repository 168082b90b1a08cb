/**
 * The fake Kubernetes API's objects, driven by the real @kubernetes/client-node: create (201 with the
 * server-set fields, Status refusals as the API reference words them), list and get.
 */
import * as k8s from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { expectStatus, pod, refusal, uniqueName, until } from '../helpers/fake-kube/fake-kube-client.js';
import { fakeKubeClientForFile } from '../helpers/fake-kube/fake-kube-client-for-file.js';

const k = fakeKubeClientForFile();
/** Suffixes for the names that must be of an exact length. */
let seq = 0;

describe('create', () => {
  it('creates with 201 and the server-set fields, and refuses a duplicate name with 409 AlreadyExists', async () => {
    const name = uniqueName();
    const res = await k.core.createNamespacedPodWithHttpInfo({ namespace: 'default', body: pod(name) });
    expect(res.httpStatusCode).toBe(201);
    const p = res.data;
    expect(p.kind).toBe('Pod');
    expect(p.metadata?.uid).toMatch(/^[0-9a-f-]{36}$/);
    expect(Number(p.metadata?.resourceVersion)).toBeGreaterThan(0);
    expect(p.metadata?.namespace).toBe('default');
    expect(p.spec?.terminationGracePeriodSeconds).toBe(30);
    expect(p.status?.phase).toBe('Pending');
    expect(p.status?.qosClass).toBe('BestEffort');
    const dup = await refusal(k.core.createNamespacedPod({ namespace: 'default', body: pod(name) }));
    expect(dup.code).toBe(409);
    expectStatus(dup.body, 409, 'AlreadyExists');
    expect(dup.body.message).toBe(`pods "${name}" already exists`);
    expect(dup.body.details).toEqual({ name, kind: 'pods' });
    expect(k.api.createCount('default', name)).toBe(1);
    expect(k.api.createAttempts('default', name)).toBe(2);
  });

  it('refuses invalid specs with 422 Invalid and one cause per field error', async () => {
    const cases: Array<[k8s.V1Pod, string, string]> = [
      [
        { metadata: { name: 'Bad_Name' }, spec: { containers: [{ name: 'c', image: 'x' }] } },
        'metadata.name',
        'FieldValueInvalid',
      ],
      [
        { metadata: { name: 'a'.repeat(254) }, spec: { containers: [{ name: 'c', image: 'x' }] } },
        'metadata.name',
        'FieldValueInvalid',
      ],
      [{ metadata: { name: 'no-containers' }, spec: { containers: [] } }, 'spec.containers', 'FieldValueRequired'],
      [
        { metadata: { name: 'no-image' }, spec: { containers: [{ name: 'c' } as k8s.V1Container] } },
        'spec.containers[0].image',
        'FieldValueRequired',
      ],
      [
        { metadata: { name: 'no-cname' }, spec: { containers: [{ image: 'x' } as k8s.V1Container] } },
        'spec.containers[0].name',
        'FieldValueRequired',
      ],
      [
        {
          metadata: { name: 'bad-label', labels: { 'bad key': 'v' } },
          spec: { containers: [{ name: 'c', image: 'x' }] },
        },
        'metadata.labels',
        'FieldValueInvalid',
      ],
      [
        {
          metadata: { name: 'long-label', labels: { k: 'v'.repeat(64) } },
          spec: { containers: [{ name: 'c', image: 'x' }] },
        },
        'metadata.labels',
        'FieldValueInvalid',
      ],
      [
        {
          metadata: { name: 'bad-cpu' },
          spec: { containers: [{ name: 'c', image: 'x', resources: { requests: { cpu: 'lots' } } }] },
        },
        'spec.containers[0].resources.requests[cpu]',
        'FieldValueInvalid',
      ],
      [
        {
          metadata: { name: 'bad-annotation', annotations: { 'leoflow.io/ok': 'x', 'not ok/at all': 'y' } },
          spec: { containers: [{ name: 'c', image: 'x' }] },
        },
        'metadata.annotations',
        'FieldValueInvalid',
      ],
      [
        {
          metadata: { name: 'bad-policy' },
          spec: { restartPolicy: 'Sometimes', containers: [{ name: 'c', image: 'x' }] },
        },
        'spec.restartPolicy',
        'FieldValueNotSupported',
      ],
    ];
    for (const [body, field, causeReason] of cases) {
      const r = await refusal(k.core.createNamespacedPod({ namespace: 'default', body }));
      expect(r.code, field).toBe(422);
      expectStatus(r.body, 422, 'Invalid');
      expect(r.body.message).toContain(`Pod "${body.metadata!.name}" is invalid: `);
      expect(r.body.details.kind).toBe('Pod');
      expect(r.body.details.causes).toContainEqual(expect.objectContaining({ field, reason: causeReason }));
    }
    // A 63-character label value and a 253-character pod name are the limits, not past them.
    const ok = await k.core.createNamespacedPod({
      namespace: 'default',
      body: {
        metadata: { name: `${'a'.repeat(240)}-${++seq}`, labels: { k: 'v'.repeat(63) } },
        spec: { containers: [{ name: 'c', image: 'x', command: ['true'] }] },
      },
    });
    expect(ok.metadata?.name?.length).toBeGreaterThan(240);
  });

  it('answers 404 for a namespace that does not exist', async () => {
    const r = await refusal(k.core.createNamespacedPod({ namespace: 'nowhere', body: pod(uniqueName()) }));
    expectStatus(r.body, 404, 'NotFound');
    expect(r.body.message).toBe('namespaces "nowhere" not found');
    expect(r.body.details).toEqual({ name: 'nowhere', kind: 'namespaces' });
  });

  it('answers 401 without a known bearer token, and 403 Forbidden as RBAC words it for a token without the right', async () => {
    const res = await fetch(`${k.api.url}/api/v1/namespaces/default/pods`);
    expect(res.status).toBe(401);
    expectStatus(await res.json(), 401, 'Unauthorized');
    k.api.grantToken(
      'reader-token',
      [{ verbs: ['get', 'list', 'watch'], resources: ['pods'], namespaces: ['default'] }],
      'system:serviceaccount:default:reader',
    );
    const rk = new k8s.KubeConfig();
    rk.loadFromFile(await k.api.kubeconfigFor('reader-token'));
    const reader = rk.makeApiClient(k8s.CoreV1Api);
    await reader.listNamespacedPod({ namespace: 'default' });
    const r = await refusal(reader.createNamespacedPod({ namespace: 'default', body: pod(uniqueName()) }));
    expectStatus(r.body, 403, 'Forbidden');
    expect(r.body.message).toBe(
      'pods is forbidden: User "system:serviceaccount:default:reader" cannot create resource "pods" in API group "" in the namespace "default"',
    );
    const other = await refusal(reader.listNamespacedPod({ namespace: 'jobs' }));
    expect(other.code).toBe(403);
    const stranger = new k8s.KubeConfig();
    stranger.loadFromFile(await k.api.kubeconfigFor('who-is-this'));
    expect(
      (await refusal(stranger.makeApiClient(k8s.CoreV1Api).listNamespacedPod({ namespace: 'default' }))).code,
    ).toBe(401);
  });

  it('refuses a create over a ResourceQuota with 403 and the quota message, and a missing service account with 403', async () => {
    k.api.setQuota('jobs', { name: 'compute', hard: { pods: '2', 'requests.cpu': '1' } });
    const small = (n: string, cpu: string) => pod(n, { resources: { requests: { cpu }, limits: { cpu } } });
    await k.core.createNamespacedPod({ namespace: 'jobs', body: small(uniqueName(), '500m') });
    const name = uniqueName();
    const r = await refusal(k.core.createNamespacedPod({ namespace: 'jobs', body: small(name, '600m') }));
    expectStatus(r.body, 403, 'Forbidden');
    expect(r.body.message).toBe(
      `pods "${name}" is forbidden: exceeded quota: compute, requested: requests.cpu=600m, used: requests.cpu=500m, limited: requests.cpu=1`,
    );
    const bare = await refusal(k.core.createNamespacedPod({ namespace: 'jobs', body: pod(name) }));
    expect(bare.body.message).toBe(
      `pods "${name}" is forbidden: failed quota: compute: must specify requests.cpu for: main`,
    );
    const sa = await refusal(
      k.core.createNamespacedPod({ namespace: 'default', body: pod(name, {}, { serviceAccountName: 'runner' }) }),
    );
    expect(sa.body.message).toBe(
      `pods "${name}" is forbidden: error looking up service account default/runner: serviceaccount "runner" not found`,
    );
    k.api.addServiceAccount('default', 'runner');
    await k.core.createNamespacedPod({ namespace: 'default', body: pod(name, {}, { serviceAccountName: 'runner' }) });
  });

  it('injects 429 with Retry-After, 500, 503, a quota refusal and a lost response, per verb and times', async () => {
    k.api.failNext({ verb: 'create', status: 429, retryAfterSeconds: 3, times: 2 });
    for (let i = 0; i < 2; i++) {
      const r = await refusal(k.core.createNamespacedPod({ namespace: 'default', body: pod(uniqueName()) }));
      expectStatus(r.body, 429, 'TooManyRequests');
      expect(r.body.details.retryAfterSeconds).toBe(3);
      expect(r.headers['retry-after']).toBe('3');
    }
    k.api.failNext({ verb: 'list', status: 500, message: 'etcdserver: request timed out' });
    const r500 = await refusal(k.core.listNamespacedPod({ namespace: 'default' }));
    expectStatus(r500.body, 500, 'InternalError');
    expect(r500.body.message).toBe('Internal error occurred: etcdserver: request timed out');
    k.api.failNext({ verb: 'get', status: 503, retryAfterSeconds: 1 });
    const r503 = await refusal(k.core.readNamespacedPod({ namespace: 'default', name: 'x' }));
    expectStatus(r503.body, 503, 'ServiceUnavailable');
    expect(r503.headers['retry-after']).toBe('1');
    const name = uniqueName();
    k.api.failNext({
      verb: 'create',
      namespace: 'default',
      status: 403,
      message: `pods "${name}" is forbidden: exceeded quota: q, requested: pods=1, used: pods=5, limited: pods=5`,
    });
    const q = await refusal(k.core.createNamespacedPod({ namespace: 'default', body: pod(name) }));
    expectStatus(q.body, 403, 'Forbidden');
    expect(k.api.createCount('default', name)).toBe(0);
    // The create takes effect, its answer is lost: the retry meets 409.
    k.api.failNext({ verb: 'create', status: 'reset', afterEffect: true });
    await expect(k.core.createNamespacedPod({ namespace: 'default', body: pod(name) })).rejects.toThrow();
    expect(k.api.createCount('default', name)).toBe(1);
    expect((await refusal(k.core.createNamespacedPod({ namespace: 'default', body: pod(name) }))).code).toBe(409);
    // Everything is back to normal once the rules are used up.
    await k.core.listNamespacedPod({ namespace: 'default' });
  });

  it('limitInflight answers 429 with Retry-After past the limit of requests served at once', async () => {
    k.api.setLatency(200, 'get');
    k.api.limitInflight(2, 2);
    try {
      const results = await Promise.allSettled(
        Array.from({ length: 5 }, () => k.core.readNamespace({ name: 'default' })),
      );
      const refused = results
        .filter((r) => r.status === 'rejected')
        .map((r) => (r as PromiseRejectedResult).reason as k8s.ApiException<string>);
      expect(results.filter((r) => r.status === 'fulfilled')).toHaveLength(2);
      expect(refused).toHaveLength(3);
      for (const e of refused) {
        expect(e.code).toBe(429);
        expect(e.headers['retry-after']).toBe('2');
        expect(JSON.parse(e.body)).toMatchObject({
          kind: 'Status',
          reason: 'TooManyRequests',
          message: 'Too many requests, please try again later.',
          details: { retryAfterSeconds: 2 },
        });
      }
    } finally {
      k.api.limitInflight(undefined);
      k.api.setLatency(0, 'get');
    }
    await k.core.readNamespace({ name: 'default' });
  });

  it('adds the injected latency to each request of the verb', async () => {
    k.api.setLatency(150, 'list');
    const t0 = Date.now();
    await k.core.listNamespacedPod({ namespace: 'default' });
    expect(Date.now() - t0).toBeGreaterThanOrEqual(140);
    k.api.setLatency(0, 'list');
    const last = k.api
      .requests()
      .filter((r) => r.verb === 'list')
      .at(-1)!;
    expect(last.durationMs).toBeGreaterThanOrEqual(140);
    expect(last.path).toBe('/api/v1/namespaces/default/pods');
  });
});

describe('list and get', () => {
  it('lists by label selector (equality, in, notin, existence) and field selector, with the list resourceVersion', async () => {
    const run = uniqueName('run');
    for (const [i, task] of ['a', 'b', 'c'].entries()) {
      const labels: Record<string, string> = { 'leoflow.io/run': run, 'leoflow.io/task': task };
      if (i === 0) labels['leoflow.io/retry'] = 'yes';
      await k.core.createNamespacedPod({ namespace: 'default', body: pod(`${run}-${task}`, {}, {}, labels) });
    }
    const names = async (labelSelector: string, fieldSelector?: string) => {
      const l = await k.core.listNamespacedPod(
        fieldSelector
          ? { namespace: 'default', labelSelector, fieldSelector }
          : { namespace: 'default', labelSelector },
      );
      expect(l.kind).toBe('PodList');
      expect(Number(l.metadata?.resourceVersion)).toBeGreaterThan(0);
      return l.items.map((p) => p.metadata!.labels!['leoflow.io/task']).sort();
    };
    expect(await names(`leoflow.io/run=${run}`)).toEqual(['a', 'b', 'c']);
    expect(await names(`leoflow.io/run==${run},leoflow.io/task in (a, c)`)).toEqual(['a', 'c']);
    expect(await names(`leoflow.io/run=${run},leoflow.io/task notin (a)`)).toEqual(['b', 'c']);
    expect(await names(`leoflow.io/run=${run},leoflow.io/retry`)).toEqual(['a']);
    expect(await names(`leoflow.io/run=${run},!leoflow.io/retry`)).toEqual(['b', 'c']);
    expect(await names(`leoflow.io/run=${run},leoflow.io/task!=b`)).toEqual(['a', 'c']);
    expect(await names(`leoflow.io/run=${run}`, `metadata.name=${run}-b`)).toEqual(['b']);
    const bad = await refusal(k.core.listNamespacedPod({ namespace: 'default', fieldSelector: 'spec.image=x' }));
    expectStatus(bad.body, 400, 'BadRequest');
    expect(bad.body.message).toBe('field label not supported: spec.image');
    const all = await k.core.listPodForAllNamespaces({ labelSelector: `leoflow.io/run=${run}`, limit: 2 });
    expect(all.items).toHaveLength(2);
    expect(all.metadata?.remainingItemCount).toBe(1);
    const rest = await k.core.listPodForAllNamespaces({
      labelSelector: `leoflow.io/run=${run}`,
      limit: 2,
      _continue: all.metadata!._continue!,
    });
    expect(rest.items).toHaveLength(1);
    expect(rest.metadata?.resourceVersion).toBe(all.metadata?.resourceVersion);
    expect(rest.metadata?._continue).toBeUndefined();
    // A continue token from before a compaction is 410 Expired.
    const page = await k.core.listPodForAllNamespaces({ labelSelector: `leoflow.io/run=${run}`, limit: 1 });
    await k.core.createNamespacedPod({ namespace: 'default', body: pod(`${run}-later`) });
    k.api.compact();
    const stale = await refusal(
      k.core.listPodForAllNamespaces({
        labelSelector: `leoflow.io/run=${run}`,
        limit: 1,
        _continue: page.metadata!._continue!,
      }),
    );
    expectStatus(stale.body, 410, 'Expired');
    expect(stale.body.message).toMatch(
      /^The provided continue parameter is too old to display a consistent list result/,
    );
  });

  it('gives a container HOSTNAME, the pod name cut to 63 characters', async () => {
    const name = `${'h'.repeat(62)}-${'x'.repeat(10)}-${++seq}`;
    await k.core.createNamespacedPod({
      namespace: 'default',
      body: pod(name, { command: ['sh', '-c', 'echo "$HOSTNAME"'] }),
    });
    await until('Succeeded', () => k.api.pod('default', name)?.status?.phase === 'Succeeded');
    expect(k.api.containerLogs('default', name)).toBe(`${'h'.repeat(62)}\n`);
  });

  it('gets a pod, and answers 404 NotFound for a missing one', async () => {
    const name = uniqueName();
    await k.core.createNamespacedPod({ namespace: 'default', body: pod(name) });
    expect((await k.core.readNamespacedPod({ namespace: 'default', name })).metadata?.name).toBe(name);
    const r = await refusal(k.core.readNamespacedPod({ namespace: 'default', name: 'missing' }));
    expectStatus(r.body, 404, 'NotFound');
    expect(r.body.message).toBe('pods "missing" not found');
    expect(r.body.details).toEqual({ name: 'missing', kind: 'pods' });
  });
});
