/**
 * The fake Kubernetes API server (test/helpers/fake-kube), driven by the real
 * @kubernetes/client-node through its kubeconfig. What is checked is what the Kubernetes API
 * reference specifies: Status objects (kind, apiVersion, status, message, reason, details, code),
 * 201 on create, the watch event stream with bookmarks and 410 Expired after compaction, and pods
 * moving through their phases with their waiting reasons and events, their containers run as real
 * local processes.
 */
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as k8s from '@kubernetes/client-node';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { isAlive } from '../helpers/process-group.js';
import { startFakeKubeApi, type FakeKubeApi } from '../helpers/fake-kube/index.js';

let api: FakeKubeApi;
let kc: k8s.KubeConfig;
let core: k8s.CoreV1Api;
const dirs: string[] = [];

beforeAll(async () => {
  api = await startFakeKubeApi({
    namespaces: ['default', 'jobs'],
    bookmarkIntervalMs: 100,
    timing: { backoffMs: 100 },
  });
  kc = new k8s.KubeConfig();
  kc.loadFromFile(api.kubeconfigPath);
  core = kc.makeApiClient(k8s.CoreV1Api);
});

afterAll(async () => {
  await api.close();
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

let seq = 0;
function uniqueName(prefix = 'p'): string {
  return `${prefix}-${++seq}-${Date.now().toString(36)}`;
}

function pod(
  name: string,
  container: Partial<k8s.V1Container> = {},
  spec: Partial<k8s.V1PodSpec> = {},
  labels?: Record<string, string>,
): k8s.V1Pod {
  return {
    metadata: labels ? { name, labels } : { name },
    spec: {
      restartPolicy: 'Never',
      containers: [{ name: 'main', image: 'busybox:1.36', command: ['sh', '-c', 'sleep 30'], ...container }],
      ...spec,
    },
  };
}

async function until<T>(
  what: string,
  get: () => T | undefined | false | Promise<T | undefined | false>,
  timeoutMs = 10_000,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await get();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** The ApiException client-node throws, with its Status body parsed. */
async function refusal(p: Promise<unknown>): Promise<{ code: number; body: any; headers: Record<string, string> }> {
  try {
    await p;
  } catch (err) {
    const e = err as k8s.ApiException<string>;
    return { code: e.code, body: typeof e.body === 'string' ? JSON.parse(e.body) : e.body, headers: e.headers };
  }
  throw new Error('the request succeeded');
}

function expectStatus(body: any, code: number, reason: string): void {
  expect(body).toMatchObject({ kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Failure', reason, code });
  expect(typeof body.message).toBe('string');
}

describe('create', () => {
  it('creates with 201 and the server-set fields, and refuses a duplicate name with 409 AlreadyExists', async () => {
    const name = uniqueName();
    const res = await core.createNamespacedPodWithHttpInfo({ namespace: 'default', body: pod(name) });
    expect(res.httpStatusCode).toBe(201);
    const p = res.data;
    expect(p.kind).toBe('Pod');
    expect(p.metadata?.uid).toMatch(/^[0-9a-f-]{36}$/);
    expect(Number(p.metadata?.resourceVersion)).toBeGreaterThan(0);
    expect(p.metadata?.namespace).toBe('default');
    expect(p.spec?.terminationGracePeriodSeconds).toBe(30);
    expect(p.status?.phase).toBe('Pending');
    expect(p.status?.qosClass).toBe('BestEffort');
    const dup = await refusal(core.createNamespacedPod({ namespace: 'default', body: pod(name) }));
    expect(dup.code).toBe(409);
    expectStatus(dup.body, 409, 'AlreadyExists');
    expect(dup.body.message).toBe(`pods "${name}" already exists`);
    expect(dup.body.details).toEqual({ name, kind: 'pods' });
    expect(api.createCount('default', name)).toBe(1);
    expect(api.createAttempts('default', name)).toBe(2);
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
      const r = await refusal(core.createNamespacedPod({ namespace: 'default', body }));
      expect(r.code, field).toBe(422);
      expectStatus(r.body, 422, 'Invalid');
      expect(r.body.message).toContain(`Pod "${body.metadata!.name}" is invalid: `);
      expect(r.body.details.kind).toBe('Pod');
      expect(r.body.details.causes).toContainEqual(expect.objectContaining({ field, reason: causeReason }));
    }
    // A 63-character label value and a 253-character pod name are the limits, not past them.
    const ok = await core.createNamespacedPod({
      namespace: 'default',
      body: {
        metadata: { name: `${'a'.repeat(240)}-${++seq}`, labels: { k: 'v'.repeat(63) } },
        spec: { containers: [{ name: 'c', image: 'x', command: ['true'] }] },
      },
    });
    expect(ok.metadata?.name?.length).toBeGreaterThan(240);
  });

  it('answers 404 for a namespace that does not exist', async () => {
    const r = await refusal(core.createNamespacedPod({ namespace: 'nowhere', body: pod(uniqueName()) }));
    expectStatus(r.body, 404, 'NotFound');
    expect(r.body.message).toBe('namespaces "nowhere" not found');
    expect(r.body.details).toEqual({ name: 'nowhere', kind: 'namespaces' });
  });

  it('answers 401 without a known bearer token, and 403 Forbidden as RBAC words it for a token without the right', async () => {
    const res = await fetch(`${api.url}/api/v1/namespaces/default/pods`);
    expect(res.status).toBe(401);
    expectStatus(await res.json(), 401, 'Unauthorized');
    api.grantToken(
      'reader-token',
      [{ verbs: ['get', 'list', 'watch'], resources: ['pods'], namespaces: ['default'] }],
      'system:serviceaccount:default:reader',
    );
    const rk = new k8s.KubeConfig();
    rk.loadFromFile(await api.kubeconfigFor('reader-token'));
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
    stranger.loadFromFile(await api.kubeconfigFor('who-is-this'));
    expect(
      (await refusal(stranger.makeApiClient(k8s.CoreV1Api).listNamespacedPod({ namespace: 'default' }))).code,
    ).toBe(401);
  });

  it('refuses a create over a ResourceQuota with 403 and the quota message, and a missing service account with 403', async () => {
    api.setQuota('jobs', { name: 'compute', hard: { pods: '2', 'requests.cpu': '1' } });
    const small = (n: string, cpu: string) => pod(n, { resources: { requests: { cpu }, limits: { cpu } } });
    await core.createNamespacedPod({ namespace: 'jobs', body: small(uniqueName(), '500m') });
    const name = uniqueName();
    const r = await refusal(core.createNamespacedPod({ namespace: 'jobs', body: small(name, '600m') }));
    expectStatus(r.body, 403, 'Forbidden');
    expect(r.body.message).toBe(
      `pods "${name}" is forbidden: exceeded quota: compute, requested: requests.cpu=600m, used: requests.cpu=500m, limited: requests.cpu=1`,
    );
    const bare = await refusal(core.createNamespacedPod({ namespace: 'jobs', body: pod(name) }));
    expect(bare.body.message).toBe(
      `pods "${name}" is forbidden: failed quota: compute: must specify requests.cpu for: main`,
    );
    const sa = await refusal(
      core.createNamespacedPod({ namespace: 'default', body: pod(name, {}, { serviceAccountName: 'runner' }) }),
    );
    expect(sa.body.message).toBe(
      `pods "${name}" is forbidden: error looking up service account default/runner: serviceaccount "runner" not found`,
    );
    api.addServiceAccount('default', 'runner');
    await core.createNamespacedPod({ namespace: 'default', body: pod(name, {}, { serviceAccountName: 'runner' }) });
  });

  it('injects 429 with Retry-After, 500, 503, a quota refusal and a lost response, per verb and times', async () => {
    api.failNext({ verb: 'create', status: 429, retryAfterSeconds: 3, times: 2 });
    for (let i = 0; i < 2; i++) {
      const r = await refusal(core.createNamespacedPod({ namespace: 'default', body: pod(uniqueName()) }));
      expectStatus(r.body, 429, 'TooManyRequests');
      expect(r.body.details.retryAfterSeconds).toBe(3);
      expect(r.headers['retry-after']).toBe('3');
    }
    api.failNext({ verb: 'list', status: 500, message: 'etcdserver: request timed out' });
    const r500 = await refusal(core.listNamespacedPod({ namespace: 'default' }));
    expectStatus(r500.body, 500, 'InternalError');
    expect(r500.body.message).toBe('Internal error occurred: etcdserver: request timed out');
    api.failNext({ verb: 'get', status: 503, retryAfterSeconds: 1 });
    const r503 = await refusal(core.readNamespacedPod({ namespace: 'default', name: 'x' }));
    expectStatus(r503.body, 503, 'ServiceUnavailable');
    expect(r503.headers['retry-after']).toBe('1');
    const name = uniqueName();
    api.failNext({
      verb: 'create',
      namespace: 'default',
      status: 403,
      message: `pods "${name}" is forbidden: exceeded quota: q, requested: pods=1, used: pods=5, limited: pods=5`,
    });
    const q = await refusal(core.createNamespacedPod({ namespace: 'default', body: pod(name) }));
    expectStatus(q.body, 403, 'Forbidden');
    expect(api.createCount('default', name)).toBe(0);
    // The create takes effect, its answer is lost: the retry meets 409.
    api.failNext({ verb: 'create', status: 'reset', afterEffect: true });
    await expect(core.createNamespacedPod({ namespace: 'default', body: pod(name) })).rejects.toThrow();
    expect(api.createCount('default', name)).toBe(1);
    expect((await refusal(core.createNamespacedPod({ namespace: 'default', body: pod(name) }))).code).toBe(409);
    // Everything is back to normal once the rules are used up.
    await core.listNamespacedPod({ namespace: 'default' });
  });

  it('limitInflight answers 429 with Retry-After past the limit of requests served at once', async () => {
    api.setLatency(200, 'get');
    api.limitInflight(2, 2);
    try {
      const results = await Promise.allSettled(
        Array.from({ length: 5 }, () => core.readNamespace({ name: 'default' })),
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
      api.limitInflight(undefined);
      api.setLatency(0, 'get');
    }
    await core.readNamespace({ name: 'default' });
  });

  it('adds the injected latency to each request of the verb', async () => {
    api.setLatency(150, 'list');
    const t0 = Date.now();
    await core.listNamespacedPod({ namespace: 'default' });
    expect(Date.now() - t0).toBeGreaterThanOrEqual(140);
    api.setLatency(0, 'list');
    const last = api
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
      await core.createNamespacedPod({ namespace: 'default', body: pod(`${run}-${task}`, {}, {}, labels) });
    }
    const names = async (labelSelector: string, fieldSelector?: string) => {
      const l = await core.listNamespacedPod(
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
    const bad = await refusal(core.listNamespacedPod({ namespace: 'default', fieldSelector: 'spec.image=x' }));
    expectStatus(bad.body, 400, 'BadRequest');
    expect(bad.body.message).toBe('field label not supported: spec.image');
    const all = await core.listPodForAllNamespaces({ labelSelector: `leoflow.io/run=${run}`, limit: 2 });
    expect(all.items).toHaveLength(2);
    expect(all.metadata?.remainingItemCount).toBe(1);
    const rest = await core.listPodForAllNamespaces({
      labelSelector: `leoflow.io/run=${run}`,
      limit: 2,
      _continue: all.metadata!._continue!,
    });
    expect(rest.items).toHaveLength(1);
    expect(rest.metadata?.resourceVersion).toBe(all.metadata?.resourceVersion);
    expect(rest.metadata?._continue).toBeUndefined();
    // A continue token from before a compaction is 410 Expired.
    const page = await core.listPodForAllNamespaces({ labelSelector: `leoflow.io/run=${run}`, limit: 1 });
    await core.createNamespacedPod({ namespace: 'default', body: pod(`${run}-later`) });
    api.compact();
    const stale = await refusal(
      core.listPodForAllNamespaces({
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
    await core.createNamespacedPod({
      namespace: 'default',
      body: pod(name, { command: ['sh', '-c', 'echo "$HOSTNAME"'] }),
    });
    await until('Succeeded', () => api.pod('default', name)?.status?.phase === 'Succeeded');
    expect(api.containerLogs('default', name)).toBe(`${'h'.repeat(62)}\n`);
  });

  it('gets a pod, and answers 404 NotFound for a missing one', async () => {
    const name = uniqueName();
    await core.createNamespacedPod({ namespace: 'default', body: pod(name) });
    expect((await core.readNamespacedPod({ namespace: 'default', name })).metadata?.name).toBe(name);
    const r = await refusal(core.readNamespacedPod({ namespace: 'default', name: 'missing' }));
    expectStatus(r.body, 404, 'NotFound');
    expect(r.body.message).toBe('pods "missing" not found');
    expect(r.body.details).toEqual({ name: 'missing', kind: 'pods' });
  });
});

describe('pods as processes', () => {
  it('runs the container command with its env: sh -c "exit 3" ends Failed with exit code 3 and reason Error', async () => {
    const name = uniqueName();
    await core.createNamespacedPod({
      namespace: 'default',
      body: pod(name, {
        command: ['sh', '-c', 'echo "token=$LEOFLOW_TOKEN host=$HOSTNAME"; exit 3'],
        env: [{ name: 'LEOFLOW_TOKEN', value: 't0k' }],
      }),
    });
    const p = await until(
      'Failed',
      () => api.pod('default', name)?.status?.phase === 'Failed' && api.pod('default', name),
    );
    const cs = p.status.containerStatuses[0];
    expect(cs.state.terminated).toMatchObject({ exitCode: 3, reason: 'Error' });
    expect(cs.containerID).toMatch(/^containerd:\/\//);
    expect(p.status.conditions.find((c: any) => c.type === 'Ready')).toMatchObject({
      status: 'False',
      reason: 'PodCompleted',
    });
    expect(await core.readNamespacedPodLog({ namespace: 'default', name })).toBe(`token=t0k host=${name}\n`);
    expect(await core.readNamespacedPodLog({ namespace: 'default', name, limitBytes: 9 })).toBe('token=t0k');
    expect(await core.readNamespacedPodLog({ namespace: 'default', name, tailLines: 1, limitBytes: 5 })).toBe('token');
    const reasons = (
      await core.listNamespacedEvent({ namespace: 'default', fieldSelector: `involvedObject.name=${name}` })
    ).items.map((e) => e.reason);
    expect(reasons).toEqual(expect.arrayContaining(['Scheduled', 'Pulled', 'Created', 'Started']));
  });

  it('moves Pending (ContainerCreating) → Running → Succeeded, each change a MODIFIED event in order', async () => {
    const name = uniqueName();
    const w = new k8s.Watch(kc);
    const seen: Array<{
      type: string;
      phase?: string;
      waiting?: string;
      running?: boolean;
      exitCode?: number;
      rv: number;
    }> = [];
    const created = await core.createNamespacedPod({
      namespace: 'default',
      body: pod(name, { command: ['sh', '-c', 'sleep 0.3'] }),
    });
    const ctl = await w.watch(
      `/api/v1/namespaces/default/pods`,
      { resourceVersion: created.metadata!.resourceVersion, fieldSelector: `metadata.name=${name}` },
      (type, o) => {
        const st = o.status?.containerStatuses?.[0]?.state;
        seen.push({
          type,
          phase: o.status?.phase,
          waiting: st?.waiting?.reason,
          running: st?.running !== undefined,
          exitCode: st?.terminated?.exitCode,
          rv: Number(o.metadata.resourceVersion),
        });
      },
      () => undefined,
    );
    await until('Succeeded', () => seen.some((s) => s.phase === 'Succeeded'));
    ctl.abort();
    expect(seen.every((s) => s.type === 'MODIFIED')).toBe(true);
    expect(seen.map((s) => s.rv)).toEqual([...seen.map((s) => s.rv)].sort((a, b) => a - b));
    const phases = seen.map((s) => `${s.phase}${s.waiting ? `/${s.waiting}` : ''}${s.running ? '/running' : ''}`);
    expect(phases).toContain('Pending/ContainerCreating');
    expect(phases).toContain('Running/running');
    expect(seen.at(-1)).toMatchObject({ phase: 'Succeeded', exitCode: 0 });
  });

  it('delete with a grace period: deletionTimestamp (MODIFIED), SIGTERM to the process, then DELETED', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'fake-kube-test-'));
    dirs.push(dir);
    const name = uniqueName();
    const marker = join(dir, 'term');
    await core.createNamespacedPod({
      namespace: 'default',
      body: pod(name, {
        command: ['sh', '-c', `trap 'echo term > ${marker}; exit 0' TERM; echo ready; while true; do sleep 0.05; done`],
      }),
    });
    // Running is reported when the process starts; its trap is set a moment later.
    await until('trap set', () => api.containerLogs('default', name) === 'ready\n');
    const pid = api.processes().at(-1)!;
    const types: string[] = [];
    const w = new k8s.Watch(kc);
    const ctl = await w.watch(
      '/api/v1/namespaces/default/pods',
      { resourceVersion: api.resourceVersion(), fieldSelector: `metadata.name=${name}` },
      (type, o) => types.push(`${type}${o.metadata.deletionTimestamp ? '+ts' : ''}`),
      () => undefined,
    );
    const answer = await core.deleteNamespacedPod({ namespace: 'default', name, gracePeriodSeconds: 5 });
    expect(answer.metadata?.deletionTimestamp).toBeDefined();
    expect(answer.metadata?.deletionGracePeriodSeconds).toBe(5);
    await until('DELETED', () => types.includes('DELETED+ts'));
    ctl.abort();
    expect(types[0]).toBe('MODIFIED+ts');
    expect(readFileSync(marker, 'utf8')).toBe('term\n');
    expect(isAlive(pid)).toBe(false);
    const killing = api.events('default', name).find((e) => e.reason === 'Killing');
    expect(killing?.message).toBe('Stopping container main');
    expect((await refusal(core.deleteNamespacedPod({ namespace: 'default', name }))).code).toBe(404);
  });

  it('SIGKILLs a process that ignores SIGTERM once the grace period is over', async () => {
    const name = uniqueName();
    await core.createNamespacedPod({
      namespace: 'default',
      body: pod(name, { command: ['sh', '-c', "trap '' TERM; echo ready; while true; do sleep 0.05; done"] }),
    });
    await until('trap set', () => api.containerLogs('default', name) === 'ready\n');
    const t0 = Date.now();
    await core.deleteNamespacedPod({ namespace: 'default', name, body: { gracePeriodSeconds: 1 } });
    await until('gone', () => !api.pod('default', name));
    expect(Date.now() - t0).toBeGreaterThanOrEqual(900);
  });

  it('close() leaves no process behind', async () => {
    const other = await startFakeKubeApi();
    const okc = new k8s.KubeConfig();
    okc.loadFromFile(other.kubeconfigPath);
    const c = okc.makeApiClient(k8s.CoreV1Api);
    await c.createNamespacedPod({
      namespace: 'default',
      body: pod('sleeper', { command: ['sh', '-c', 'sleep 100 & sleep 100'] }),
    });
    await until('Running', () => other.pod('default', 'sleeper')?.status?.phase === 'Running');
    const pids = other.processes();
    expect(pids).toHaveLength(1);
    await other.close();
    expect(pids.every((p) => !isAlive(p))).toBe(true);
    expect(existsSync(other.kubeconfigPath)).toBe(false);
  });
});

describe('pods that cannot start', () => {
  const reasonOf = (name: string) => api.pod('default', name)?.status?.containerStatuses?.[0]?.state?.waiting?.reason;

  it('an image that cannot be pulled: ErrImagePull, then ImagePullBackOff, with Failed and BackOff events', async () => {
    const name = uniqueName();
    await core.createNamespacedPod({
      namespace: 'default',
      body: pod(name, { image: 'registry.example.com/nonexistent:1' }),
    });
    await until('ErrImagePull', () => reasonOf(name) === 'ErrImagePull');
    await until('ImagePullBackOff', () => reasonOf(name) === 'ImagePullBackOff');
    expect(api.pod('default', name).status.phase).toBe('Pending');
    const events = (
      await core.listNamespacedEvent({ namespace: 'default', fieldSelector: `involvedObject.name=${name}` })
    ).items;
    expect(events.map((e) => e.message)).toEqual(
      expect.arrayContaining([
        'Error: ErrImagePull',
        'Error: ImagePullBackOff',
        'Back-off pulling image "registry.example.com/nonexistent:1"',
      ]),
    );
    expect(events.find((e) => e.message?.startsWith('Failed to pull image'))?.type).toBe('Warning');
    await core.deleteNamespacedPod({ namespace: 'default', name });
    await until('gone', () => !api.pod('default', name));
  });

  it('an invalid image name: InvalidImageName', async () => {
    const name = uniqueName();
    await core.createNamespacedPod({ namespace: 'default', body: pod(name, { image: 'Not A Valid/Image' }) });
    await until('InvalidImageName', () => reasonOf(name) === 'InvalidImageName');
    expect(api.events('default', name).map((e) => e.message)).toContain('Error: InvalidImageName');
  });

  it('an env var from a missing secret: CreateContainerConfigError, and it starts once the secret exists', async () => {
    const name = uniqueName();
    await core.createNamespacedPod({
      namespace: 'default',
      body: pod(name, {
        command: ['sh', '-c', 'echo "$PASSWORD"'],
        env: [{ name: 'PASSWORD', valueFrom: { secretKeyRef: { name: 'db', key: 'password' } } }],
      }),
    });
    await until('CreateContainerConfigError', () => reasonOf(name) === 'CreateContainerConfigError');
    expect(api.pod('default', name).status.containerStatuses[0].state.waiting.message).toBe('secret "db" not found');
    expect(api.events('default', name).map((e) => e.message)).toContain('Error: secret "db" not found');
    api.setSecret('default', 'db', { password: 's3cret' });
    await until('Succeeded', () => api.pod('default', name)?.status?.phase === 'Succeeded');
    expect(api.containerLogs('default', name)).toBe('s3cret\n');
  });

  it('requests beyond every node: Unschedulable with the scheduler message and a FailedScheduling event', async () => {
    const name = uniqueName();
    await core.createNamespacedPod({
      namespace: 'default',
      body: pod(name, { resources: { requests: { cpu: '64' } } }),
    });
    const cond = await until('Unschedulable', () =>
      api.pod('default', name)?.status?.conditions?.find((c: any) => c.type === 'PodScheduled' && c.status === 'False'),
    );
    expect(cond.reason).toBe('Unschedulable');
    expect(cond.message).toBe(
      '0/3 nodes are available: 3 Insufficient cpu. preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod.',
    );
    const ev = (
      await core.listNamespacedEvent({
        namespace: 'default',
        fieldSelector: `involvedObject.name=${name},reason=FailedScheduling`,
      })
    ).items;
    expect(ev).toHaveLength(1);
    expect(ev[0]).toMatchObject({ type: 'Warning', message: cond.message, source: { component: 'default-scheduler' } });
    // Never bound: a delete removes it at once.
    const gone = await core.deleteNamespacedPod({ namespace: 'default', name, gracePeriodSeconds: 30 });
    expect(gone.metadata?.name).toBe(name);
    expect(api.pod('default', name)).toBeUndefined();
  });

  it('a nodeSelector no node matches, or a taint the pod does not tolerate: Unschedulable, preemption not helpful', async () => {
    const tainted = await startFakeKubeApi({
      kubelet: 'processes',
      nodes: {
        count: 2,
        cpu: '2',
        memory: '4Gi',
        labels: { pool: 'batch' },
        taints: [{ key: 'dedicated', value: 'leoflow', effect: 'NoSchedule' }],
      },
    });
    try {
      const tkc = new k8s.KubeConfig();
      tkc.loadFromFile(tainted.kubeconfigPath);
      const c = tkc.makeApiClient(k8s.CoreV1Api);
      const message = async (name: string) =>
        (
          await until('Unschedulable', () =>
            tainted
              .pod('default', name)
              ?.status?.conditions?.find((x: any) => x.type === 'PodScheduled' && x.status === 'False'),
          )
        ).message;
      await c.createNamespacedPod({ namespace: 'default', body: pod('no-toleration', { command: ['true'] }) });
      expect(await message('no-toleration')).toBe(
        '0/2 nodes are available: 2 node(s) had untolerated taint {dedicated: leoflow}. preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling.',
      );
      const tolerations = [{ key: 'dedicated', operator: 'Equal', value: 'leoflow', effect: 'NoSchedule' }];
      await c.createNamespacedPod({
        namespace: 'default',
        body: pod('wrong-pool', { command: ['true'] }, { tolerations, nodeSelector: { pool: 'gpu' } }),
      });
      expect(await message('wrong-pool')).toBe(
        "0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector. preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling.",
      );
      await c.createNamespacedPod({
        namespace: 'default',
        body: pod('fits', { command: ['true'] }, { tolerations, nodeSelector: { pool: 'batch' } }),
      });
      await until('Succeeded', () => tainted.pod('default', 'fits')?.status?.phase === 'Succeeded');
    } finally {
      await tainted.close();
    }
  });

  it('a lost node turns its pods Unknown, and a pod deleted from outside is DELETED while it runs', async () => {
    const a = uniqueName();
    const b = uniqueName();
    await core.createNamespacedPod({ namespace: 'default', body: pod(a) });
    await core.createNamespacedPod({ namespace: 'default', body: pod(b) });
    await until(
      'both running',
      () => api.pod('default', a)?.status?.phase === 'Running' && api.pod('default', b)?.status?.phase === 'Running',
    );
    api.loseNode('default', a);
    const lost = api.pod('default', a);
    expect(lost.status.phase).toBe('Unknown');
    expect(lost.status.reason).toBe('NodeLost');
    expect(lost.status.conditions.find((c: any) => c.type === 'Ready')).toMatchObject({
      status: 'False',
      reason: 'NodeLost',
    });
    expect(api.events('default', a).find((e) => e.reason === 'NodeNotReady')).toMatchObject({
      type: 'Warning',
      source: { component: 'node-controller' },
    });
    const types: string[] = [];
    const ctl = await new k8s.Watch(kc).watch(
      '/api/v1/namespaces/default/pods',
      { resourceVersion: api.resourceVersion(), fieldSelector: `metadata.name=${b}` },
      (t) => types.push(t),
      () => undefined,
    );
    api.deleteFromOutside('default', b);
    await until('DELETED', () => types.includes('DELETED'));
    ctl.abort();
    expect(api.pod('default', b)).toBeUndefined();
    api.deleteFromOutside('default', a);
  });
});

describe('kubelet details', () => {
  const stateOf = (name: string, i = 0) => api.pod('default', name)?.status?.containerStatuses?.[i]?.state;

  it('restartPolicy OnFailure restarts a failing container with CrashLoopBackOff and a rising restartCount', async () => {
    const name = uniqueName();
    await core.createNamespacedPod({
      namespace: 'default',
      body: pod(name, { command: ['sh', '-c', 'exit 1'] }, { restartPolicy: 'OnFailure' }),
    });
    const cs = await until('two restarts', () => {
      const c = api.pod('default', name)?.status?.containerStatuses?.[0];
      return c?.restartCount >= 2 && c;
    });
    expect(cs.lastState.terminated).toMatchObject({ exitCode: 1, reason: 'Error' });
    expect(api.pod('default', name).status.phase).toBe('Running');
    expect(
      api
        .events('default', name)
        .some((e) => e.reason === 'BackOff' && e.message.startsWith('Back-off restarting failed container main')),
    ).toBe(true);
    await core.deleteNamespacedPod({ namespace: 'default', name, gracePeriodSeconds: 1 });
    await until('gone', () => !api.pod('default', name));
  });

  it('imagePullPolicy Never: ErrImageNeverPull unless the image is on the node', async () => {
    const name = uniqueName();
    await core.createNamespacedPod({
      namespace: 'default',
      body: pod(name, { image: 'leoflow:local', imagePullPolicy: 'Never', command: ['true'] }),
    });
    await until('ErrImageNeverPull', () => stateOf(name)?.waiting?.reason === 'ErrImageNeverPull');
    api.preloadImage('leoflow:local');
    const other = uniqueName();
    await core.createNamespacedPod({
      namespace: 'default',
      body: pod(other, { image: 'leoflow:local', imagePullPolicy: 'Never', command: ['true'] }),
    });
    await until('Succeeded', () => api.pod('default', other)?.status?.phase === 'Succeeded');
    expect(api.events('default', other).find((e) => e.reason === 'Pulled')?.message).toBe(
      'Container image "leoflow:local" already present on machine',
    );
  });

  it("resolves a command on the image's PATH, not the host's: not found is a StartError, as runc reports it", async () => {
    // `node` is on this host's PATH, but the Leoflow image has it in /usr/local/bin only.
    const name = uniqueName();
    await core.createNamespacedPod({
      namespace: 'default',
      body: pod(name, { image: 'registry.example.com/leoflow:0.1.0', command: ['/usr/bin/node', '-v'] }),
    });
    await until('Failed', () => api.pod('default', name)?.status?.phase === 'Failed');
    expect(stateOf(name)?.terminated).toMatchObject({ exitCode: 128, reason: 'StartError' });
    expect(stateOf(name)?.terminated.message).toContain(
      'error during container init: exec: "/usr/bin/node": stat /usr/bin/node: no such file or directory',
    );
    const missing = uniqueName();
    await core.createNamespacedPod({
      namespace: 'default',
      body: pod(missing, { image: 'leoflow:test', command: ['nosuch', 'agent'] }),
    });
    await until('Failed', () => api.pod('default', missing)?.status?.phase === 'Failed');
    expect(stateOf(missing)?.terminated.message).toContain('exec: "nosuch": executable file not found in $PATH');
    // The shipped image's `leoflow` (a link to /app/bin/leoflow.js, `#!/usr/bin/env node`) runs.
    const ok = uniqueName();
    await core.createNamespacedPod({
      namespace: 'default',
      body: pod(ok, { image: 'leoflow:test', command: ['leoflow', '--version'] }),
    });
    await until('Succeeded', () => api.pod('default', ok)?.status?.phase === 'Succeeded', 10_000);
    expect(api.containerLogs('default', ok)).toContain('0.1.0');
  });

  it('activeDeadlineSeconds: the pod fails with DeadlineExceeded and its process is stopped', async () => {
    const name = uniqueName();
    await core.createNamespacedPod({ namespace: 'default', body: pod(name, {}, { activeDeadlineSeconds: 1 }) });
    await until('Running', () => api.pod('default', name)?.status?.phase === 'Running');
    const pid = api.processes().at(-1)!;
    const p = await until(
      'DeadlineExceeded',
      () => api.pod('default', name)?.status?.reason === 'DeadlineExceeded' && api.pod('default', name),
      5000,
    );
    expect(p.status).toMatchObject({
      phase: 'Failed',
      message: 'Pod was active on the node longer than the specified deadline',
    });
    await until('stopped', () => stateOf(name)?.terminated);
    expect(stateOf(name).terminated.exitCode).toBe(143);
    expect(isAlive(pid)).toBe(false);
  });

  it('a pod on a lost node stays Terminating after a graceful delete (no kubelet answers) until a force delete', async () => {
    const name = uniqueName();
    await core.createNamespacedPod({ namespace: 'default', body: pod(name) });
    await until('Running', () => api.pod('default', name)?.status?.phase === 'Running');
    api.loseNode('default', name);
    await core.deleteNamespacedPod({ namespace: 'default', name, gracePeriodSeconds: 1 });
    await new Promise((r) => setTimeout(r, 1300));
    const stuck = api.pod('default', name);
    expect(stuck.metadata.deletionTimestamp).toBeDefined();
    expect(stuck.status.phase).toBe('Unknown');
    await core.deleteNamespacedPod({ namespace: 'default', name, gracePeriodSeconds: 0 });
    expect(api.pod('default', name)).toBeUndefined();
  });

  it('PATCH and PUT change labels, annotations and images, refuse other spec changes with 422, and a stale resourceVersion with 409', async () => {
    const name = uniqueName();
    const created = await core.createNamespacedPod({ namespace: 'default', body: pod(name, {}, {}, { app: 'a' }) });
    // client-node sends a JSON patch (application/json-patch+json) by default.
    const patched = await core.patchNamespacedPod({
      namespace: 'default',
      name,
      body: [
        { op: 'add', path: '/metadata/labels/leoflow.io~1adopted', value: 'yes' },
        { op: 'add', path: '/metadata/annotations', value: { note: 'x' } },
      ],
    });
    expect(patched.metadata?.labels).toEqual({ app: 'a', 'leoflow.io/adopted': 'yes' });
    expect(patched.metadata?.annotations).toEqual({ note: 'x' });
    expect(Number(patched.metadata?.resourceVersion)).toBeGreaterThan(Number(created.metadata?.resourceVersion));
    const forbidden = await refusal(
      core.patchNamespacedPod({
        namespace: 'default',
        name,
        body: [{ op: 'replace', path: '/spec/restartPolicy', value: 'Always' }],
      }),
    );
    expectStatus(forbidden.body, 422, 'Invalid');
    expect(forbidden.body.message).toMatch(
      /^Pod ".+" is invalid: spec: Forbidden: pod updates may not change fields other than `spec.containers\[\*\].image`/,
    );
    const badLabel = await refusal(
      core.patchNamespacedPod({
        namespace: 'default',
        name,
        body: [{ op: 'add', path: '/metadata/labels/bad key', value: 'x' }],
      }),
    );
    expect(badLabel.body.details.causes[0].field).toBe('metadata.labels');
    // Read, change, replace, as a client does: the fake kubelet may report on the pod between the
    // read and the replace (a 409 then, as from a real API server), so the client reads again.
    let current = await core.readNamespacedPod({ namespace: 'default', name });
    let replaced: Awaited<ReturnType<typeof core.replaceNamespacedPod>> | undefined;
    for (let attempt = 1; !replaced; attempt++) {
      current.spec!.containers[0]!.image = 'busybox:1.37';
      try {
        replaced = await core.replaceNamespacedPod({ namespace: 'default', name, body: current });
      } catch (err) {
        if ((err as { code?: number }).code !== 409 || attempt === 10) throw err;
        current = await core.readNamespacedPod({ namespace: 'default', name });
      }
    }
    expect(replaced.spec?.containers[0]?.image).toBe('busybox:1.37');
    const stale = await refusal(core.replaceNamespacedPod({ namespace: 'default', name, body: current }));
    expectStatus(stale.body, 409, 'Conflict');
    expect(stale.body.message).toBe(
      `Operation cannot be fulfilled on pods "${name}": the object has been modified; please apply your changes to the latest version and try again`,
    );
  });

  it('a delete with a stale uid precondition is refused with 409 Conflict', async () => {
    const name = uniqueName();
    await core.createNamespacedPod({ namespace: 'default', body: pod(name) });
    const r = await refusal(
      core.deleteNamespacedPod({
        namespace: 'default',
        name,
        body: { preconditions: { uid: '00000000-0000-0000-0000-000000000000' } },
      }),
    );
    expectStatus(r.body, 409, 'Conflict');
    expect(r.body.message).toMatch(
      /^Operation cannot be fulfilled on pods ".+": Precondition failed: UID in precondition: 0{8}-/,
    );
    expect(api.pod('default', name)).toBeDefined();
  });
});

describe('watch', () => {
  it('streams the changes after a resourceVersion, with bookmarks carrying the latest resourceVersion', async () => {
    const list = await core.listNamespacedPod({ namespace: 'jobs' });
    const from = list.metadata!.resourceVersion!;
    const events: Array<{ type: string; rv: string; name?: string }> = [];
    const name = uniqueName();
    // Only this test's pod: others in the namespace may change meanwhile.
    const ctl = await new k8s.Watch(kc).watch(
      '/api/v1/namespaces/jobs/pods',
      { resourceVersion: from, allowWatchBookmarks: true, labelSelector: `test=${name}` },
      (type, o) => events.push({ type, rv: o.metadata.resourceVersion, name: o.metadata.name }),
      () => undefined,
    );
    api.setQuota('jobs', { name: 'compute', hard: {} });
    await core.createNamespacedPod({ namespace: 'jobs', body: pod(name, { command: ['true'] }, {}, { test: name }) });
    await until('a bookmark after the pod ended', () =>
      events.some(
        (e) =>
          e.type === 'BOOKMARK' && Number(e.rv) >= Number(api.pod('jobs', name)?.metadata.resourceVersion ?? Infinity),
      ),
    );
    ctl.abort();
    expect(events[0]).toMatchObject({ type: 'ADDED', name });
    expect(events.filter((e) => e.type !== 'BOOKMARK').every((e) => e.name === name)).toBe(true);
    expect(events.filter((e) => e.type === 'BOOKMARK').every((e) => e.name === undefined)).toBe(true);
  });

  it('answers a watch from a compacted resourceVersion with an ERROR event carrying 410 Expired, then ends it', async () => {
    const before = api.resourceVersion();
    await core.createNamespacedPod({ namespace: 'default', body: pod(uniqueName()) });
    api.compact();
    const got: any[] = [];
    const ended = new Promise<unknown>((resolve) => {
      void new k8s.Watch(kc).watch(
        '/api/v1/namespaces/default/pods',
        { resourceVersion: before },
        (type, o) => got.push({ type, o }),
        resolve,
      );
    });
    expect(await ended).toBeNull();
    expect(got).toHaveLength(1);
    expect(got[0].type).toBe('ERROR');
    expect(got[0].o).toMatchObject({
      kind: 'Status',
      apiVersion: 'v1',
      status: 'Failure',
      reason: 'Expired',
      code: 410,
    });
    expect(got[0].o.message).toMatch(/^too old resource version: \d+ \(\d+\)$/);
  });

  it('an informer (client-node ListWatch) relists after 410 and after the server closes its watch', async () => {
    const ns = 'jobs';
    const informer = k8s.makeInformer(kc, `/api/v1/namespaces/${ns}/pods`, () =>
      core.listNamespacedPod({ namespace: ns }),
    );
    const added: string[] = [];
    const errors: unknown[] = [];
    informer.on('add', (o) => added.push(o.metadata!.name!));
    informer.on('error', (e) => errors.push(e));
    await informer.start();
    const lists = () => api.requests().filter((r) => r.verb === 'list' && r.namespace === ns).length;
    const watches = () => api.requests().filter((r) => r.verb === 'watch' && r.namespace === ns).length;
    await until('watching', () => api.openWatches().some((w) => w.namespace === ns));
    const listsBefore = lists();
    const first = uniqueName();
    await core.createNamespacedPod({ namespace: ns, body: pod(first, { command: ['true'] }) });
    await until('added', () => added.includes(first));
    // Closed by the server: it watches again from where it was, without a list.
    const w0 = watches();
    api.closeWatches();
    await until('re-watch', () => watches() > w0 && api.openWatches().some((w) => w.namespace === ns));
    expect(lists()).toBe(listsBefore);
    // Compacted under an open watch: ERROR 410, then a relist.
    api.compact({ expireWatches: true });
    await until('relist', () => lists() > listsBefore && api.openWatches().some((w) => w.namespace === ns));
    const second = uniqueName();
    await core.createNamespacedPod({ namespace: ns, body: pod(second, { command: ['true'] }) });
    await until('added after relist', () => added.includes(second));
    expect(errors).toEqual([]);
    await informer.stop();
  });
});

describe('watch edges', () => {
  it('a watch from a resourceVersion the server has not reached ends with an ERROR event carrying 504 Timeout', async () => {
    const ahead = String(Number(api.resourceVersion()) + 1_000_000);
    const got: any[] = [];
    const ended = new Promise<unknown>((resolve) => {
      void new k8s.Watch(kc).watch(
        '/api/v1/namespaces/default/pods',
        { resourceVersion: ahead },
        (type, o) => got.push({ type, o }),
        resolve,
      );
    });
    await ended;
    expect(got).toHaveLength(1);
    expect(got[0].type).toBe('ERROR');
    expect(got[0].o).toMatchObject({ kind: 'Status', reason: 'Timeout', code: 504, details: { retryAfterSeconds: 1 } });
    expect(got[0].o.message).toBe(`Timeout: Too large resource version: ${ahead}, current: ${api.resourceVersion()}`);
  });

  it('keeps only historyLimit changes per resource: a watch from behind the window gets 410, one inside it replays', async () => {
    const small = await startFakeKubeApi({ kubelet: 'manual', historyLimit: 3 });
    try {
      const skc = new k8s.KubeConfig();
      skc.loadFromFile(small.kubeconfigPath);
      const c = skc.makeApiClient(k8s.CoreV1Api);
      const start = small.resourceVersion();
      for (let i = 0; i < 5; i++) await c.createNamespacedPod({ namespace: 'default', body: pod(`w${i}`) });
      const watchFrom = async (rv: string) => {
        const got: Array<{ type: string; code?: number; name?: string }> = [];
        const ctl = await new k8s.Watch(skc).watch(
          '/api/v1/namespaces/default/pods',
          { resourceVersion: rv },
          (type, o) => got.push({ type, code: o.code, name: o.metadata?.name }),
          () => undefined,
        );
        await new Promise((r) => setTimeout(r, 150));
        ctl.abort();
        return got;
      };
      expect(await watchFrom(start)).toEqual([{ type: 'ERROR', code: 410, name: undefined }]);
      const inside = await watchFrom(String(Number(small.resourceVersion()) - 3));
      expect(inside.map((e) => `${e.type} ${e.name}`)).toEqual(['ADDED w2', 'ADDED w3', 'ADDED w4']);
    } finally {
      await small.close();
    }
  });

  it('a list at a resourceVersion the server has not reached is answered 504 Timeout after 3 s', async () => {
    const ahead = String(Number(api.resourceVersion()) + 1_000_000);
    const r = await refusal(
      core.listNamespacedPod({ namespace: 'default', resourceVersion: ahead, resourceVersionMatch: 'NotOlderThan' }),
    );
    expectStatus(r.body, 504, 'Timeout');
    expect(r.body.details).toMatchObject({
      causes: [{ reason: 'ResourceVersionTooLarge', message: 'Too large resource version' }],
      retryAfterSeconds: 1,
    });
  });

  it('an HTTP 410 on a watch request (injected) makes an informer relist', async () => {
    const informer = k8s.makeInformer(kc, '/api/v1/namespaces/default/pods', () =>
      core.listNamespacedPod({ namespace: 'default' }),
    );
    const errors: unknown[] = [];
    informer.on('error', (e) => errors.push(e));
    await informer.start();
    await until('watching', () => api.openWatches().some((w) => w.namespace === 'default' && w.resourceVersion !== ''));
    const lists = () => api.requests().filter((r) => r.verb === 'list' && r.namespace === 'default').length;
    const before = lists();
    api.failNext({ verb: 'watch', namespace: 'default', status: 410, message: 'too old resource version: 1 (2)' });
    api.closeWatches();
    await until(
      'relisted and watching',
      () => lists() > before && api.openWatches().some((w) => w.namespace === 'default'),
    );
    const gone = api.requests().filter((r) => r.verb === 'watch' && r.status === 410);
    expect(gone.length).toBeGreaterThanOrEqual(1);
    expect(errors).toEqual([]);
    await informer.stop();
  });

  it('ends a watch cleanly after its timeoutSeconds', async () => {
    const t0 = Date.now();
    const ended = await new Promise<unknown>((resolve) => {
      void new k8s.Watch(kc).watch(
        '/api/v1/namespaces/default/pods',
        { resourceVersion: api.resourceVersion(), timeoutSeconds: 1 },
        () => undefined,
        resolve,
      );
    });
    expect(ended).toBeNull();
    expect(Date.now() - t0).toBeGreaterThanOrEqual(950);
  });

  it('closeWatches({ abrupt: true }) drops the connection: client-node reports an error, not a clean end', async () => {
    const done: unknown[] = [];
    await new k8s.Watch(kc).watch(
      '/api/v1/namespaces/default/pods',
      { resourceVersion: api.resourceVersion() },
      () => undefined,
      (err) => done.push(err),
    );
    await until('watching', () => api.openWatches().length > 0);
    api.closeWatches({ abrupt: true });
    await until('done', () => done.length > 0);
    expect(done[0]).toBeInstanceOf(Error);
    const clean: unknown[] = [];
    await new k8s.Watch(kc).watch(
      '/api/v1/namespaces/default/pods',
      { resourceVersion: api.resourceVersion() },
      () => undefined,
      (err) => clean.push(err),
    );
    await until('watching', () => api.openWatches().length > 0);
    api.closeWatches();
    await until('done', () => clean.length > 0);
    expect(clean[0]).toBeNull();
  });

  it('a watch with resourceVersion 0 or none starts with the current objects as ADDED; sendInitialEvents ends them with a bookmark', async () => {
    const ns = 'jobs';
    const names = (await core.listNamespacedPod({ namespace: ns })).items.map((p) => p.metadata!.name!).sort();
    const got: Array<{ type: string; name?: string; end?: string }> = [];
    const ctl = await new k8s.Watch(kc).watch(
      `/api/v1/namespaces/${ns}/pods`,
      { sendInitialEvents: true, resourceVersionMatch: 'NotOlderThan', allowWatchBookmarks: true },
      (type, o) =>
        got.push({ type, name: o.metadata?.name, end: o.metadata?.annotations?.['k8s.io/initial-events-end'] }),
      () => undefined,
    );
    await until('initial-events-end', () => got.some((e) => e.end === 'true'));
    ctl.abort();
    const end = got.findIndex((e) => e.end === 'true');
    expect(
      got
        .slice(0, end)
        .map((e) => e.name)
        .sort(),
    ).toEqual(names);
    expect(got.slice(0, end).every((e) => e.type === 'ADDED')).toBe(true);
  });
});

describe('connection', () => {
  it('serves HTTPS with a CA in the kubeconfig, and in-cluster config from a service account mount', async () => {
    const secure = await startFakeKubeApi({ tls: true, kubelet: 'manual' });
    const saved = { host: process.env.KUBERNETES_SERVICE_HOST, port: process.env.KUBERNETES_SERVICE_PORT };
    try {
      expect(secure.url).toMatch(/^https:\/\/127\.0\.0\.1:\d+$/);
      const skc = new k8s.KubeConfig();
      skc.loadFromFile(secure.kubeconfigPath);
      expect(skc.getCurrentCluster()?.skipTLSVerify).toBeFalsy();
      await skc.makeApiClient(k8s.CoreV1Api).createNamespacedPod({ namespace: 'default', body: pod('over-tls') });
      const mount = await secure.serviceAccountMount({ namespace: 'default' });
      Object.assign(process.env, mount.env);
      const inCluster = new k8s.KubeConfig();
      inCluster.loadFromCluster(mount.pathPrefix);
      const list = await inCluster
        .makeApiClient(k8s.CoreV1Api)
        .listNamespacedPod({ namespace: inCluster.getContextObject(inCluster.getCurrentContext())!.namespace! });
      expect(list.items.map((p) => p.metadata?.name)).toEqual(['over-tls']);
    } finally {
      for (const [k, v] of [
        ['KUBERNETES_SERVICE_HOST', saved.host],
        ['KUBERNETES_SERVICE_PORT', saved.port],
      ] as const) {
        if (v === undefined) delete process.env[k];
        else process.env[k] = v;
      }
      await secure.close();
    }
  });
});

describe('wire format and manual driving', () => {
  it('streams a watch on /api/v1/watch/… as newline-delimited {type, object} JSON', async () => {
    const manual = await startFakeKubeApi({ kubelet: 'manual', bookmarkIntervalMs: 50 });
    try {
      const from = manual.resourceVersion();
      const ctl = new AbortController();
      const res = await fetch(
        `${manual.url}/api/v1/watch/namespaces/default/pods?resourceVersion=${from}&allowWatchBookmarks=true`,
        { headers: { authorization: `Bearer ${manual.token}` }, signal: ctl.signal },
      );
      expect(res.status).toBe(200);
      expect(res.headers.get('content-type')).toBe('application/json');
      const mkc = new k8s.KubeConfig();
      mkc.loadFromFile(manual.kubeconfigPath);
      await mkc.makeApiClient(k8s.CoreV1Api).createNamespacedPod({ namespace: 'default', body: pod('wire') });
      const reader = res.body!.getReader();
      let text = '';
      const added = () => text.indexOf('"type":"ADDED"');
      while (added() < 0 || !text.slice(added()).includes('"BOOKMARK"'))
        text += new TextDecoder().decode((await reader.read()).value);
      ctl.abort();
      expect(text.endsWith('\n')).toBe(true);
      const events = text
        .split('\n')
        .filter((l) => l !== '')
        .map((l) => JSON.parse(l));
      for (const e of events) expect(Object.keys(e).sort()).toEqual(['object', 'type']);
      const first = events.find((e) => e.type !== 'BOOKMARK');
      expect(first.type).toBe('ADDED');
      expect(first.object).toMatchObject({
        kind: 'Pod',
        apiVersion: 'v1',
        metadata: { name: 'wire', namespace: 'default' },
      });
      const bookmark = events.at(-1);
      expect(bookmark.object).toEqual({
        kind: 'Pod',
        apiVersion: 'v1',
        metadata: { resourceVersion: manual.resourceVersion(), creationTimestamp: null },
      });
    } finally {
      await manual.close();
    }
  });

  it('in manual mode nothing moves until the test drives it: setPodStatus, bindPod, addPodEvent, and a delete after the grace period', async () => {
    const manual = await startFakeKubeApi({ kubelet: 'manual' });
    try {
      const mkc = new k8s.KubeConfig();
      mkc.loadFromFile(manual.kubeconfigPath);
      const c = mkc.makeApiClient(k8s.CoreV1Api);
      await c.createNamespacedPod({ namespace: 'default', body: pod('driven') });
      await new Promise((r) => setTimeout(r, 100));
      expect(manual.pod('default', 'driven').spec.nodeName).toBeUndefined();
      expect(manual.processes()).toEqual([]);
      const seen: string[] = [];
      const ctl = await new k8s.Watch(mkc).watch(
        '/api/v1/namespaces/default/pods',
        { resourceVersion: manual.resourceVersion() },
        (t, o) => seen.push(`${t} ${o.status?.phase}`),
        () => undefined,
      );
      manual.bindPod('default', 'driven', 'node-2');
      manual.setPodStatus('default', 'driven', {
        phase: 'Pending',
        conditions: [{ type: 'PodScheduled', status: 'True' }],
        containerStatuses: [
          {
            name: 'main',
            ready: false,
            restartCount: 0,
            image: 'busybox:1.36',
            imageID: '',
            state: { waiting: { reason: 'ImagePullBackOff', message: 'Back-off pulling image' } },
          },
        ],
      });
      manual.addPodEvent('default', 'driven', { reason: 'Failed', message: 'Error: ImagePullBackOff' });
      manual.setPodStatus('default', 'driven', { phase: 'Running' });
      await until('three MODIFIED', () => seen.length >= 3);
      expect(seen).toEqual(['MODIFIED Pending', 'MODIFIED Pending', 'MODIFIED Running']);
      const events = await c.listNamespacedEvent({ namespace: 'default', fieldSelector: 'involvedObject.name=driven' });
      expect(events.items.map((e) => [e.type, e.reason, e.message])).toEqual([
        ['Warning', 'Failed', 'Error: ImagePullBackOff'],
      ]);
      const answer = await c.deleteNamespacedPod({ namespace: 'default', name: 'driven', gracePeriodSeconds: 1 });
      expect(answer.metadata?.deletionGracePeriodSeconds).toBe(1);
      await until('DELETED', () => seen.includes('DELETED Running'), 3000);
      ctl.abort();
    } finally {
      await manual.close();
    }
  });
});
