import { pino } from 'pino';
import { afterEach, expect, it } from 'vitest';
import type { Attempt } from '../../src/core/attempt.js';
import { podName } from '../../src/core/pod-identity.js';
import {
  createKubernetesExecutor,
  type KubernetesExecutor,
} from '../../src/executors/kubernetes/kubernetes-executor.js';
import { loadKubeConfig } from '../../src/executors/kubernetes/load-kube-config.js';
import { startFakeKubeApi, type FakeKubeApi } from '../helpers/fake-kube/index.js';
import { endsReporter, podSettings, quietStore, testAttempt } from '../helpers/fake-kube/test-executor.js';

/**
 * The executor's API calls share keep-alive connections (keep-alive-kube-config.ts): 200 pods
 * created through Pro's 16 drainers open a handful of connections, not one per create.
 */

const NS = 'jobs';
let kube: FakeKubeApi | undefined;
let ex: KubernetesExecutor | undefined;
afterEach(async () => {
  await ex?.shutdown(0);
  await kube?.close();
});

it('creates 200 pods over a few keep-alive connections, not one each', async () => {
  kube = await startFakeKubeApi({ namespaces: [NS], kubelet: 'manual' });
  ex = createKubernetesExecutor({
    kubeConfig: loadKubeConfig({ kind: 'file', path: kube.kubeconfigPath }),
    pods: podSettings(NS, { serverUrl: 'http://cp:7070' }),
    reporter: endsReporter(),
    store: quietStore({ standings: async () => new Map() }),
    logger: pino({ level: 'silent' }),
    standingsMs: 3_600_000,
  });
  await ex.lead(true);
  const before = kube.connectionsOpened;
  const attempts: Attempt[] = Array.from({ length: 200 }, (_, i) =>
    testAttempt({ tiId: String(i + 1), runId: String(i + 1000), taskId: 't', maxTries: 1 }),
  );
  // Pro's 16 drainers, each dispatching in turn.
  const queue = [...attempts];
  const drainer = async () => {
    for (let a = queue.shift(); a; a = queue.shift()) await ex!.dispatch(a);
  };
  await Promise.all(Array.from({ length: 16 }, drainer));
  expect(attempts.every((a) => kube!.createCount(NS, podName(a)) === 1)).toBe(true);
  const opened = kube.connectionsOpened - before;
  expect(opened, `${opened} connections for 200 creates`).toBeLessThanOrEqual(20);
});
