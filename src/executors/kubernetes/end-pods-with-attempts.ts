import type { Logger } from 'pino';
import type { KubernetesStore } from './kubernetes-executor-options.js';
import type { PodAttemptEnds } from './pod-attempt-ends.js';
import type { PodAttempts } from './pod-attempts.js';
import { podCondition } from './pod-condition.js';
import type { PodWatch } from './pod-watch.js';

/**
 * Pods end with their attempts. The store can end an attempt the pod knows nothing of (the
 * heartbeat reaper, a run's end, a retry from the API), and a pod's agent may never reach the
 * server: so the attempts of live pods are read from the store now and then. A pod whose attempt
 * is over is deleted; a pod running for `agentConnectMs` whose agent has not reported the attempt
 * started fails it with its last lines (POD_AGENT_NEVER_CONNECTED) instead of waiting for the
 * heartbeat reaper's `agent_lost`.
 */

export interface PodsEndContext {
  live: PodAttempts;
  watches: ReadonlyMap<string, PodWatch>;
  ends: PodAttemptEnds;
  store: KubernetesStore;
  log: Logger;
  /** The grace period a deleted pod gets (seconds). */
  graceSeconds: number;
  agentConnectMs: number;
  /** Where the pods' agents are told to connect, named in the error. */
  serverUrl: string;
}

/** One read of the store for every live pod's attempt, and what it means for each pod. */
export async function endPodsWithAttempts(c: PodsEndContext): Promise<void> {
  const readAt = performance.now();
  const followed = [...c.live.values()].filter((p) => !p.over && !p.waitingFor && p.createdAt < readAt);
  if (followed.length === 0) return;
  const standings = await c.store.standings(followed.map((p) => p.attempt));
  for (const p of followed) {
    const standing = standings.get(p.attempt.tiId);
    if (p.over || standing === undefined) continue;
    if (standing === 'running') {
      p.agentStarted = true;
      continue;
    }
    const pod = c.watches.get(p.namespace)?.get(p.name);
    if (standing === 'over') {
      if (!pod) continue;
      const cond = podCondition(pod);
      if (cond.kind === 'succeeded' || cond.kind === 'failed') continue;
      p.over = true;
      c.log.info(
        { tiId: p.attempt.tiId, try: p.attempt.tryNumber, pod: p.name, namespace: p.namespace },
        'the attempt of this pod is over in the store: deleting the pod',
      );
      void c.ends.deletePod(p.namespace, p.name, c.graceSeconds);
    } else if (p.running && p.runningAt !== null && readAt - p.runningAt >= c.agentConnectMs) {
      const ranS = Math.round((readAt - p.runningAt) / 1000);
      void c.ends.failWithLogTail(
        p,
        `POD_AGENT_NEVER_CONNECTED: ` +
          `pod ${p.name} ran ${ranS}s and its agent never reported the attempt started to ${c.serverUrl} (check ` +
          `--pod-server-url and the network between the pods and the control plane)`,
        c.graceSeconds,
      );
    }
  }
}
