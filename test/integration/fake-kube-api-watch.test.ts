/**
 * The fake Kubernetes API's watches: the event stream with bookmarks, and its edges (410 Expired after
 * compaction, a version ahead of the server, closed watches).
 */
import * as k8s from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { startFakeKubeApi } from '../helpers/fake-kube/index.js';
import { expectStatus, pod, refusal, uniqueName, until } from '../helpers/fake-kube/fake-kube-client.js';
import { fakeKubeClientForFile } from '../helpers/fake-kube/fake-kube-client-for-file.js';

const k = fakeKubeClientForFile();

describe('watch', () => {
  it('streams the changes after a resourceVersion, with bookmarks carrying the latest resourceVersion', async () => {
    const list = await k.core.listNamespacedPod({ namespace: 'jobs' });
    const from = list.metadata!.resourceVersion!;
    const events: Array<{ type: string; rv: string; name?: string }> = [];
    const name = uniqueName();
    // Only this test's pod: others in the namespace may change meanwhile.
    const ctl = await new k8s.Watch(k.kc).watch(
      '/api/v1/namespaces/jobs/pods',
      { resourceVersion: from, allowWatchBookmarks: true, labelSelector: `test=${name}` },
      (type, o) => events.push({ type, rv: o.metadata.resourceVersion, name: o.metadata.name }),
      () => undefined,
    );
    k.api.setQuota('jobs', { name: 'compute', hard: {} });
    await k.core.createNamespacedPod({ namespace: 'jobs', body: pod(name, { command: ['true'] }, {}, { test: name }) });
    await until('a bookmark after the pod ended', () =>
      events.some(
        (e) =>
          e.type === 'BOOKMARK' &&
          Number(e.rv) >= Number(k.api.pod('jobs', name)?.metadata.resourceVersion ?? Infinity),
      ),
    );
    ctl.abort();
    expect(events[0]).toMatchObject({ type: 'ADDED', name });
    expect(events.filter((e) => e.type !== 'BOOKMARK').every((e) => e.name === name)).toBe(true);
    expect(events.filter((e) => e.type === 'BOOKMARK').every((e) => e.name === undefined)).toBe(true);
  });

  it('answers a watch from a compacted resourceVersion with an ERROR event carrying 410 Expired, then ends it', async () => {
    const before = k.api.resourceVersion();
    await k.core.createNamespacedPod({ namespace: 'default', body: pod(uniqueName()) });
    k.api.compact();
    const got: any[] = [];
    const ended = new Promise<unknown>((resolve) => {
      void new k8s.Watch(k.kc).watch(
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
    const informer = k8s.makeInformer(k.kc, `/api/v1/namespaces/${ns}/pods`, () =>
      k.core.listNamespacedPod({ namespace: ns }),
    );
    const added: string[] = [];
    const errors: unknown[] = [];
    informer.on('add', (o) => added.push(o.metadata!.name!));
    informer.on('error', (e) => errors.push(e));
    await informer.start();
    const lists = () => k.api.requests().filter((r) => r.verb === 'list' && r.namespace === ns).length;
    const watches = () => k.api.requests().filter((r) => r.verb === 'watch' && r.namespace === ns).length;
    await until('watching', () => k.api.openWatches().some((w) => w.namespace === ns));
    const listsBefore = lists();
    const first = uniqueName();
    await k.core.createNamespacedPod({ namespace: ns, body: pod(first, { command: ['true'] }) });
    await until('added', () => added.includes(first));
    // Closed by the server: it watches again from where it was, without a list.
    const w0 = watches();
    k.api.closeWatches();
    await until('re-watch', () => watches() > w0 && k.api.openWatches().some((w) => w.namespace === ns));
    expect(lists()).toBe(listsBefore);
    // Compacted under an open watch: ERROR 410, then a relist.
    k.api.compact({ expireWatches: true });
    await until('relist', () => lists() > listsBefore && k.api.openWatches().some((w) => w.namespace === ns));
    const second = uniqueName();
    await k.core.createNamespacedPod({ namespace: ns, body: pod(second, { command: ['true'] }) });
    await until('added after relist', () => added.includes(second));
    expect(errors).toEqual([]);
    await informer.stop();
  });
});

describe('watch edges', () => {
  it('a watch from a resourceVersion the server has not reached ends with an ERROR event carrying 504 Timeout', async () => {
    const ahead = String(Number(k.api.resourceVersion()) + 1_000_000);
    const got: any[] = [];
    const ended = new Promise<unknown>((resolve) => {
      void new k8s.Watch(k.kc).watch(
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
    expect(got[0].o.message).toBe(`Timeout: Too large resource version: ${ahead}, current: ${k.api.resourceVersion()}`);
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
    const ahead = String(Number(k.api.resourceVersion()) + 1_000_000);
    const r = await refusal(
      k.core.listNamespacedPod({ namespace: 'default', resourceVersion: ahead, resourceVersionMatch: 'NotOlderThan' }),
    );
    expectStatus(r.body, 504, 'Timeout');
    expect(r.body.details).toMatchObject({
      causes: [{ reason: 'ResourceVersionTooLarge', message: 'Too large resource version' }],
      retryAfterSeconds: 1,
    });
  });

  it('an HTTP 410 on a watch request (injected) makes an informer relist', async () => {
    const informer = k8s.makeInformer(k.kc, '/api/v1/namespaces/default/pods', () =>
      k.core.listNamespacedPod({ namespace: 'default' }),
    );
    const errors: unknown[] = [];
    informer.on('error', (e) => errors.push(e));
    await informer.start();
    await until('watching', () =>
      k.api.openWatches().some((w) => w.namespace === 'default' && w.resourceVersion !== ''),
    );
    const lists = () => k.api.requests().filter((r) => r.verb === 'list' && r.namespace === 'default').length;
    const before = lists();
    k.api.failNext({ verb: 'watch', namespace: 'default', status: 410, message: 'too old resource version: 1 (2)' });
    k.api.closeWatches();
    await until(
      'relisted and watching',
      () => lists() > before && k.api.openWatches().some((w) => w.namespace === 'default'),
    );
    const gone = k.api.requests().filter((r) => r.verb === 'watch' && r.status === 410);
    expect(gone.length).toBeGreaterThanOrEqual(1);
    expect(errors).toEqual([]);
    await informer.stop();
  });

  it('ends a watch cleanly after its timeoutSeconds', async () => {
    const t0 = Date.now();
    const ended = await new Promise<unknown>((resolve) => {
      void new k8s.Watch(k.kc).watch(
        '/api/v1/namespaces/default/pods',
        { resourceVersion: k.api.resourceVersion(), timeoutSeconds: 1 },
        () => undefined,
        resolve,
      );
    });
    expect(ended).toBeNull();
    expect(Date.now() - t0).toBeGreaterThanOrEqual(950);
  });

  it('closeWatches({ abrupt: true }) drops the connection: client-node reports an error, not a clean end', async () => {
    const done: unknown[] = [];
    await new k8s.Watch(k.kc).watch(
      '/api/v1/namespaces/default/pods',
      { resourceVersion: k.api.resourceVersion() },
      () => undefined,
      (err) => done.push(err),
    );
    await until('watching', () => k.api.openWatches().length > 0);
    k.api.closeWatches({ abrupt: true });
    await until('done', () => done.length > 0);
    expect(done[0]).toBeInstanceOf(Error);
    const clean: unknown[] = [];
    await new k8s.Watch(k.kc).watch(
      '/api/v1/namespaces/default/pods',
      { resourceVersion: k.api.resourceVersion() },
      () => undefined,
      (err) => clean.push(err),
    );
    await until('watching', () => k.api.openWatches().length > 0);
    k.api.closeWatches();
    await until('done', () => clean.length > 0);
    expect(clean[0]).toBeNull();
  });

  it('a watch with resourceVersion 0 or none starts with the current objects as ADDED; sendInitialEvents ends them with a bookmark', async () => {
    const ns = 'jobs';
    const names = (await k.core.listNamespacedPod({ namespace: ns })).items.map((p) => p.metadata!.name!).sort();
    const got: Array<{ type: string; name?: string; end?: string }> = [];
    const ctl = await new k8s.Watch(k.kc).watch(
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
