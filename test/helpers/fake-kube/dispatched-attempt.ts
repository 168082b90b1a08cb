import { randomUUID } from 'node:crypto';
import { podName } from '../../../src/core/pod-identity.js';
import type { Attempt } from '../../../src/core/attempt.js';
import type { KubernetesExecutorOptions } from '../../../src/executors/kubernetes/kubernetes-executor-options.js';
import { NS, attempt, type RecordingExecutors } from './recording-executors.js';

/**
 * An executor of the file's harness (made with `over`) that leads and has dispatched one attempt
 * (`attempt()`), its pod created and not yet bound to a node.
 */
export async function dispatchedAttempt(k: RecordingExecutors, over?: Partial<KubernetesExecutorOptions>) {
  const { ex, rec } = k.executor(over);
  await ex.lead(true);
  const a = attempt();
  await ex.dispatch(a);
  return { ex, rec, a };
}

/** The kubelet's part, by hand: `a`'s pod bound to a node, then given `status`. */
export function bindWithStatus(k: RecordingExecutors, a: Attempt, status: Record<string, unknown>): void {
  k.kube.bindPod(NS, podName(a));
  k.kube.setPodStatus(NS, podName(a), status);
}

/** The next try of `a`: the same task instance, its try number one more, a new attempt token. */
export function nextTry(a: Attempt): Attempt {
  return { ...a, tryNumber: a.tryNumber + 1, attemptToken: randomUUID() };
}
