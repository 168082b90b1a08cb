import { randomUUID } from 'node:crypto';
import type { Attempt, AttemptResult } from '../../../src/core/attempt.js';
import type { AttemptReporter } from '../../../src/executors/executor.js';
import type {
  KubernetesExecutorOptions,
  KubernetesStore,
} from '../../../src/executors/kubernetes/kubernetes-executor-options.js';

/**
 * The pieces a test of the kubernetes executor builds it from: its pod settings (by default the
 * Pro edition's, editions/pro/config.json), a reporter that only passes ends on, a store that
 * does nothing unless told, and attempts with fresh ids.
 */
export function podSettings(
  namespace: string,
  over: Partial<KubernetesExecutorOptions['pods']> = {},
): KubernetesExecutorOptions['pods'] {
  return {
    install: 'install-a',
    namespace,
    image: 'leoflow:test',
    serverUrl: 'http://leoflow:7070',
    agentCommand: ['leoflow'],
    killGraceMs: 10_000,
    podPendingTimeoutMs: 300_000,
    keepSucceededMs: 0,
    keepFailedMs: 3_600_000,
    ...over,
  };
}

/** A reporter whose only effect is `finished` (by default none): started is accepted, logs dropped. */
export function endsReporter(finished: (a: Attempt, result: AttemptResult) => void = () => {}): AttemptReporter {
  return {
    started: async () => true,
    log: () => {},
    heartbeat: async () => new Set(),
    logsSoFar: async () => ({ stdout: 0, stderr: 0 }),
    finished: async (a, result) => finished(a, result),
  };
}

/** A store that does nothing (no attempt active, every attempt lost for good), but for `over`. */
export function quietStore(over: Partial<KubernetesStore> = {}): KubernetesStore {
  return {
    lost: async () => true,
    pending: async () => {},
    active: async () => [],
    lastLines: async () => [],
    podGone: async () => {},
    standings: async (attempts) => new Map(attempts.map((a) => [a.tiId, 'queued'])),
    ...over,
  };
}

/** From 100: tests name small ids of their own. */
let nextTi = 100;

/** An attempt of a new TI (ids counted per file), try 1 of 3, running `true`. */
export function testAttempt(over: Partial<Attempt> = {}): Attempt {
  const tiId = String(nextTi++);
  return {
    tiId,
    runId: String(nextTi + 5000),
    dagId: 'etl',
    taskId: `t${tiId}`,
    tryNumber: 1,
    maxTries: 3,
    attemptToken: randomUUID(),
    dispatchKey: 'k',
    command: ['true'],
    env: {},
    cwd: null,
    timeoutMs: null,
    ...over,
  };
}

/** A pod's status once its task container runs (`ready`: its Ready condition too, as a kubelet reports). */
export function runningPodStatus(o: { ready?: boolean } = {}) {
  return {
    phase: 'Running',
    conditions: [{ type: 'PodScheduled', status: 'True' }, ...(o.ready ? [{ type: 'Ready', status: 'True' }] : [])],
    containerStatuses: [
      {
        name: 'task',
        ready: true,
        restartCount: 0,
        image: 'leoflow:test',
        imageID: '',
        state: { running: { startedAt: new Date().toISOString() } },
      },
    ],
  };
}

/** A pod's task container in `state`, not ready, never restarted (image `x`). */
export function taskContainer(state: Record<string, unknown>) {
  return { name: 'task', image: 'x', imageID: '', ready: false, restartCount: 0, state };
}

/** A pod's status while the scheduler finds no node for it, saying why (`message`). */
export function unschedulablePodStatus(message: string) {
  return {
    phase: 'Pending',
    conditions: [{ type: 'PodScheduled', status: 'False', reason: 'Unschedulable', message }],
  };
}
