/**
 * The fake Kubernetes API's connection (HTTPS, in-cluster config) and wire format, each test on a
 * server of its own.
 */
import * as k8s from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { startFakeKubeApi } from '../helpers/fake-kube/index.js';
import { pod, until } from '../helpers/fake-kube/fake-kube-client.js';

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
