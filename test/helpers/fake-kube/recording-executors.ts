/**
 * The kubernetes executor's integration tests' harness (test/integration/kubernetes-executor*.test.ts):
 * a fresh fake API server per test with its kubelet in manual mode, and executors whose store
 * records what they write (finished, lost, pending) and answers the attempts' standings from the
 * pods.
 */
import { afterEach, beforeEach } from 'vitest';
import { pino } from 'pino';
import type { Attempt, AttemptResult } from '../../../src/core/attempt.js';
import { podName } from '../../../src/core/pod-identity.js';
import { loadKubeConfig } from '../../../src/executors/kubernetes/load-kube-config.js';
import {
  createKubernetesExecutor,
  type KubernetesExecutor,
} from '../../../src/executors/kubernetes/kubernetes-executor.js';
import type { KubernetesExecutorOptions } from '../../../src/executors/kubernetes/kubernetes-executor-options.js';
import { startFakeKubeApi, type FakeKubeApi } from './index.js';
import { endsReporter, podSettings, testAttempt } from './test-executor.js';

/** The namespace the executors' pods go to. */
export const NS = 'jobs';

/** What an executor's store was told. */
export interface Recorded {
  finished: { tiId: string; result: AttemptResult }[];
  lost: { tiId: string; tryNumber: number; error: string; free: boolean }[];
  pending: { tiId: string; reason: string | null }[];
}

/** The harness of one test file; `kube` is the running test's server (a test may replace it). */
export interface RecordingExecutors {
  kube: FakeKubeApi;
  /** The lines each attempt's agent delivered before its pod ended (by TI id), as the store has them. */
  readonly taskLines: Map<string, string[]>;
  executor(
    over?: Partial<KubernetesExecutorOptions>,
    active?: { attempt: Attempt; running: boolean }[],
  ): { ex: KubernetesExecutor; rec: Recorded };
  /** Shuts an executor the test made itself down after the test, as the harness's own are. */
  track(ex: KubernetesExecutor): void;
}

/** Registers the hooks: a server before each test; after it, its executors shut down and the server closed. */
export function useRecordingExecutors(): RecordingExecutors {
  const executors: KubernetesExecutor[] = [];
  const h: RecordingExecutors = {
    kube: undefined as unknown as FakeKubeApi,
    taskLines: new Map(),
    executor(over = {}, active = []) {
      const rec: Recorded = { finished: [], lost: [], pending: [] };
      const ex = createKubernetesExecutor({
        kubeConfig: loadKubeConfig({ kind: 'file', path: h.kube.kubeconfigPath }),
        pods: podSettings(NS, {
          serverUrl: 'http://cp:7070',
          killGraceMs: 1000,
          podPendingTimeoutMs: 60_000,
          keepFailedMs: 60_000,
        }),
        reporter: endsReporter((a, result) => void rec.finished.push({ tiId: a.tiId, result })),
        store: {
          lost: async (a, error, free) => {
            if (rec.lost.some((l) => l.tiId === a.tiId && l.tryNumber === a.tryNumber)) return false;
            rec.lost.push({ tiId: a.tiId, tryNumber: a.tryNumber, error, free });
            return true;
          },
          pending: async (a, reason) => void rec.pending.push({ tiId: a.tiId, reason }),
          active: async () => active,
          podGone: async () => {},
          lastLines: async (a) => h.taskLines.get(a.tiId) ?? [],
          // The agent of a running pod connects and starts its attempt; one the store ended is `over`.
          standings: async (attempts) =>
            new Map(
              attempts.map((a) => [
                a.tiId,
                rec.lost.some((l) => l.tiId === a.tiId && l.tryNumber === a.tryNumber)
                  ? 'over'
                  : h.kube.pod(NS, podName(a))?.status?.phase === 'Running'
                    ? 'running'
                    : 'queued',
              ]),
            ),
        },
        logger: pino({ level: process.env.KLOG ?? 'silent' }),
        sweepMs: 50,
        standingsMs: 50,
        ...over,
      });
      executors.push(ex);
      return { ex, rec };
    },
    track: (ex) => void executors.push(ex),
  };
  beforeEach(async () => {
    h.kube = await startFakeKubeApi({ namespaces: [NS], kubelet: 'manual', bookmarkIntervalMs: 100 });
  });
  afterEach(async () => {
    for (const e of executors.splice(0)) await e.shutdown(0);
    await h.kube.close();
  });
  return h;
}

/** An attempt of task load of DAG etl-a. */
export function attempt(over: Partial<Attempt> = {}): Attempt {
  return testAttempt({ dagId: 'etl-a', taskId: 'load', ...over });
}
