import { pino } from 'pino';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { podName } from '../../src/core/pod-identity.js';
import {
  createKubernetesExecutor,
  type KubernetesExecutor,
} from '../../src/executors/kubernetes/kubernetes-executor.js';
import { loadKubeConfig } from '../../src/executors/kubernetes/load-kube-config.js';
import { startFakeKubeApi, type FakeKubeApi } from '../helpers/fake-kube/index.js';
import { endsReporter, podSettings, quietStore, testAttempt } from '../helpers/fake-kube/test-executor.js';
import { waitFor } from '../helpers/leoflow-process.js';

/**
 * The pod watch has liveness: a watch gone silent without closing (a half-open connection, which
 * the fake's blackHoleWatches makes) is noticed within a minute and watched again, so a pod's
 * change is not missed until the heartbeat reaper. The executor has the Pro edition's defaults.
 */

const NS = 'jobs';
let kube: FakeKubeApi;
let ex: KubernetesExecutor | undefined;

beforeEach(async () => {
  kube = await startFakeKubeApi({ namespaces: [NS], kubelet: 'manual' });
});
afterEach(async () => {
  await ex?.shutdown(0);
  await kube.close();
});

it(
  'notices a black-holed pod watch within a minute and sees the pod deleted meanwhile',
  { timeout: 120_000 },
  async () => {
    const lost: string[] = [];
    ex = createKubernetesExecutor({
      kubeConfig: loadKubeConfig({ kind: 'file', path: kube.kubeconfigPath }),
      pods: podSettings(NS),
      reporter: endsReporter(),
      store: quietStore({
        lost: async (_a, error) => {
          lost.push(error);
          return true;
        },
      }),
      logger: pino({ level: process.env.KLOG ?? 'silent' }),
    });
    await ex.lead(true);
    const a = testAttempt({ tiId: '7', runId: '70', taskId: 'load', maxTries: 1 });
    await ex.dispatch(a);
    const silentAt = performance.now();
    kube.blackHoleWatches();
    kube.deleteFromOutside(NS, podName(a));
    await waitFor('the deletion seen', async () => lost.length > 0, 65_000, 250);
    expect(performance.now() - silentAt, 'noticed within a minute').toBeLessThan(60_000);
    expect(lost[0]).toMatch(/^POD_DELETED: /);
  },
);
