import { randomUUID } from 'node:crypto';
import { pino } from 'pino';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { Attempt } from '../../src/core/attempt.js';
import { podName } from '../../src/core/pod-identity.js';
import {
  createKubernetesExecutor,
  type KubernetesExecutor,
} from '../../src/executors/kubernetes/kubernetes-executor.js';
import { loadKubeConfig } from '../../src/executors/kubernetes/load-kube-config.js';
import { startFakeKubeApi, type FakeKubeApi } from '../helpers/fake-kube/index.js';
import {
  endsReporter,
  podSettings,
  runningPodStatus,
  quietStore,
  testAttempt,
} from '../helpers/fake-kube/test-executor.js';
import { waitFor } from '../helpers/leoflow-process.js';

/**
 * A node lost as Kubernetes 1.27+ reports it, with the Pro edition's defaults (kill grace 10 s,
 * 16 dispatch drainers): the retries of its tasks wait for the earlier tries' pods outside the
 * drainers, so no unrelated task waits behind them, and a pod whose deletion no kubelet confirms
 * is read as lost. The fake's kubelet is manual: the test binds the pods to the node and says they run.
 */

const NS = 'jobs';
const NODE = 'node-lost';
/** The Pro edition's dispatch_workers (editions/pro/config.json). */
const DRAINERS = 16;
let kube: FakeKubeApi;
/** The attempts timed out (their tokens): over in the store. */
const timedOut = new Set<string>();
let ex: KubernetesExecutor | undefined;

interface Recorded {
  failed: { tiId: string; error: string | undefined }[];
  lost: { tiId: string; error: string; free: boolean }[];
  pending: Map<string, (string | null)[]>;
}

/** The executor as the Pro edition's defaults make it (editions/pro/config.json), on a recording store. */
function proExecutor(): { ex: KubernetesExecutor; rec: Recorded } {
  const rec: Recorded = { failed: [], lost: [], pending: new Map() };
  ex = createKubernetesExecutor({
    kubeConfig: loadKubeConfig({ kind: 'file', path: kube.kubeconfigPath }),
    pods: podSettings(NS),
    reporter: endsReporter((a, result) => void rec.failed.push({ tiId: a.tiId, error: result.error ?? undefined })),
    store: quietStore({
      lost: async (a, error, free) => {
        rec.lost.push({ tiId: a.tiId, error, free: free === true });
        return true;
      },
      pending: async (a, reason) => void rec.pending.set(a.tiId, [...(rec.pending.get(a.tiId) ?? []), reason]),
      // The agent of a running pod connects and starts its attempt; a timed-out one is over.
      standings: async (attempts) =>
        new Map(
          attempts.map((a) => [
            a.tiId,
            timedOut.has(a.attemptToken)
              ? 'over'
              : kube.pod(NS, podName(a))?.status?.phase === 'Running'
                ? 'running'
                : 'queued',
          ]),
        ),
    }),
    logger: pino({ level: process.env.KLOG ?? 'silent' }),
  });
  return { ex, rec };
}

/** The dispatch pool's drainers: `DRAINERS` at a time, in order; resolves when each dispatch has. */
function drain(e: KubernetesExecutor, attempts: Attempt[]): Map<string, Promise<number>> {
  const done = new Map<string, Promise<number>>();
  const queue = attempts.map((a) => {
    let resolve!: (ms: number) => void;
    done.set(a.tiId, new Promise<number>((r) => (resolve = r)));
    return { a, resolve };
  });
  const worker = async () => {
    for (let item = queue.shift(); item; item = queue.shift()) {
      await e.dispatch(item.a);
      item.resolve(performance.now());
    }
  };
  for (let i = 0; i < DRAINERS; i++) void worker();
  return done;
}

const running = runningPodStatus({ ready: true });

/** `count` first tries running on NODE, then the node lost (its kubelet silent) and each try timed out. */
async function firstTriesOnALostNode(e: KubernetesExecutor, count: number, notReadyAfterMs?: number) {
  const first = Array.from({ length: count }, () => testAttempt());
  await Promise.all([...drain(e, first).values()]);
  for (const a of first) {
    kube.bindPod(NS, podName(a), NODE);
    kube.setPodStatus(NS, podName(a), running);
  }
  await waitFor('running seen', async () => first.every((a) => !e.holdsLive(a.tiId, a.attemptToken)));
  kube.loseNodeAsCurrent(NS, podName(first[0]!), notReadyAfterMs === undefined ? {} : { notReadyAfterMs });
  // Their timeouts: the attempts end in the store and their pods are deleted with the grace period.
  for (const a of first) {
    timedOut.add(a.attemptToken);
    expect(e.cancel(a.tiId, 'timeout')).toBe(true);
  }
  return first.map((a) => ({ first: a, retry: { ...a, tryNumber: 2, attemptToken: randomUUID() } }));
}

beforeEach(async () => {
  kube = await startFakeKubeApi({ namespaces: [NS], kubelet: 'manual' });
});
afterEach(async () => {
  await ex?.shutdown(0);
  ex = undefined;
  await kube.close();
});

describe('a lost node', () => {
  it(
    'with 48 pods delays no unrelated task; the retries wait for the old pods, never forced, until the Node is deleted',
    { timeout: 90_000 },
    async () => {
      const { ex, rec } = proExecutor();
      await ex.lead(true);
      const tries = await firstTriesOnALostNode(ex, 48);
      const cancelledAt = performance.now();
      const unrelated = testAttempt({ dagId: 'other' });
      const offered = performance.now();
      const dispatched = drain(ex, [...tries.map((t) => t.retry), unrelated]);
      const at = await dispatched.get(unrelated.tiId)!;
      expect(at - offered, 'the unrelated pod is created at once').toBeLessThan(2_000);
      expect(kube.createCount(NS, podName(unrelated))).toBe(1);
      for (const { first, retry } of tries) {
        expect(ex.holdsLive(retry.tiId, retry.attemptToken), 'a parked retry is held live').toBe(true);
        expect(kube.createCount(NS, podName(retry))).toBe(0);
        await waitFor('its pending reason', async () => (rec.pending.get(retry.tiId) ?? []).length > 0);
        expect(rec.pending.get(retry.tiId)![0]).toBe(
          `EARLIER_TRY_POD:waiting for pod ${podName(first)} on node ${NODE} to be gone (deleted, not yet confirmed by its kubelet)`,
        );
      }
      // Past the grace period (15 s) plus 10 s no kubelet has confirmed the deletes: the old pods
      // may still run on the partitioned node, so nothing is force-deleted and no retry starts.
      await new Promise((r) => setTimeout(r, Math.max(0, 27_000 - (performance.now() - cancelledAt))));
      for (const { first, retry } of tries) {
        expect(kube.pod(NS, podName(first)), 'the old pod is still there (Terminating)').toBeDefined();
        expect(kube.createCount(NS, podName(retry)), 'no retry beside a pod that may run').toBe(0);
      }
      const last = rec.pending.get(tries[0]!.retry.tiId)!.at(-1);
      expect(last).toContain('not confirmed by its kubelet; if the node is dead: kubectl delete pod --force');
      // The Node is deleted (an operator, or the cloud's node lifecycle controller): the pod GC
      // removes its pods, and every retry starts.
      kube.deleteNode(NODE);
      await waitFor(
        'every retry created',
        async () => tries.every((t) => kube.createCount(NS, podName(t.retry)) === 1),
        10_000,
        200,
      );
      expect(rec.failed, 'no retry failed for waiting').toEqual([]);
    },
  );

  it(
    'ends a running attempt on a NotReady node at once, free, but its retry waits until an operator force-deletes the pod',
    { timeout: 30_000 },
    async () => {
      const { ex, rec } = proExecutor();
      await ex.lead(true);
      const first = testAttempt();
      await ex.dispatch(first);
      kube.bindPod(NS, podName(first), NODE);
      kube.setPodStatus(NS, podName(first), running);
      await waitFor('running seen', async () => !ex.holdsLive(first.tiId, first.attemptToken));
      kube.loseNodeAsCurrent(NS, podName(first), { notReadyAfterMs: 500 });
      await waitFor('lost', async () => rec.lost.some((l) => l.tiId === first.tiId), 10_000);
      expect(rec.lost.find((l) => l.tiId === first.tiId)).toMatchObject({ free: true });
      expect(rec.lost.find((l) => l.tiId === first.tiId)!.error).toMatch(/^POD_LOST:NodeNotReady/);
      const retry = { ...first, tryNumber: 2, attemptToken: randomUUID() };
      await ex.dispatch(retry);
      const reason = `EARLIER_TRY_POD:waiting for pod ${podName(first)} on NotReady node ${NODE} (if the node is dead: kubectl delete pod --force, or delete the Node)`;
      await waitFor('the retry says why', async () => (rec.pending.get(retry.tiId) ?? []).includes(reason), 5_000);
      await new Promise((r) => setTimeout(r, 3_000));
      const old = kube.pod(NS, podName(first));
      expect(old?.status?.phase, 'the old pod may still run: it is not force-deleted').toBe('Running');
      expect(old?.metadata?.deletionTimestamp, 'it is deleted gracefully').toBeDefined();
      expect(kube.createCount(NS, podName(retry)), 'no retry beside it').toBe(0);
      expect(ex.holdsLive(retry.tiId, retry.attemptToken)).toBe(true);
      // The operator knows the node is dead: `kubectl delete pod --force`.
      kube.deleteFromOutside(NS, podName(first));
      await waitFor('the retry created', async () => kube.createCount(NS, podName(retry)) === 1, 5_000);
      expect(rec.failed).toEqual([]);
    },
  );
});
