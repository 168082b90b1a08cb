import type { V1Pod } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import type { Attempt } from '../executor.js';
import type { KubernetesStore } from './kubernetes-executor-options.js';
import type { PodAttemptEnds } from './pod-attempt-ends.js';
import type { PodAttempt, PodAttempts } from './pod-attempts.js';
import { podName } from '../../core/pod-identity.js';
import { podGraceSeconds, podNamespace, type PodSettings } from './pod-manifest.js';
import type { PodWatch } from './pod-watch.js';
import { podAttemptKey, podsAtLead } from './pods-at-lead.js';

/**
 * What a new leader does with what it finds (pods-at-lead.ts) once its watches are listed: follow
 * the pods of live attempts, delete strays, create again the pods of queued attempts, and end as
 * lost the running attempts whose pod is gone.
 */

export interface PodAdoptContext {
  live: PodAttempts;
  watches: ReadonlyMap<string, PodWatch>;
  store: KubernetesStore;
  ends: PodAttemptEnds;
  pods: PodSettings;
  log: Logger;
  /** False once this replica stopped leading after the lead this adoption is for. */
  stillLeading(): boolean;
  onPod(p: PodAttempt, type: 'MODIFIED', pod: V1Pod): void;
  dispatch(attempt: Attempt): Promise<void>;
}

/** `active`: the attempts the store says are queued or running; `running`: the ti ids of those running. */
export async function adoptPodsAtLead(
  c: PodAdoptContext,
  active: Attempt[],
  running: Set<string>,
): Promise<{ adopted: number; deleted: number; recreated: number }> {
  const found = podsAtLead(active, c.watches.values(), (ns, name) => c.live.byPod(ns, name) !== undefined);
  let adopted = 0;
  for (const { attempt, namespace, pod } of found.adopt) {
    if (c.live.byTi(attempt.tiId)) continue;
    const created = pod.metadata!.creationTimestamp;
    c.onPod(
      c.live.track(
        attempt,
        namespace,
        created ? performance.now() - (Date.now() - new Date(created).getTime()) : performance.now(),
      ),
      'MODIFIED',
      pod,
    );
    adopted++;
  }
  // Its attempt is over (ended, reaped, retried): the pod must not run on beside the next. Read
  // again first: an attempt claimed since the first read (by the leader before us, in an
  // overlap) has a pod that is not a stray.
  const current =
    found.strays.length === 0
      ? new Map<string, Attempt>()
      : new Map((await c.store.active()).map((r) => [podAttemptKey(r.attempt), r.attempt]));
  let deleted = 0;
  for (const s of found.strays) {
    if (c.live.byPod(s.namespace, s.name) || !c.stillLeading()) continue;
    const late = current.get(s.key);
    const pod = c.watches.get(s.namespace)?.get(s.name);
    if (late && podName(late) === s.name) {
      if (pod && !c.live.byTi(late.tiId)) {
        adopted++;
        c.onPod(c.live.track(late, s.namespace, performance.now()), 'MODIFIED', pod);
      }
      continue;
    }
    deleted++;
    // With its grace period, never forced: it may still run, and its retry waits until it is gone.
    void c.ends.deletePod(s.namespace, s.name, podGraceSeconds(c.pods.killGraceMs));
  }
  const missing = active.filter((a) => !c.live.byTi(a.tiId));
  for (const a of missing) {
    if (!running.has(a.tiId)) {
      // Queued, its pod never created or not yet visible: create it (idempotent by its name).
      void c
        .dispatch(a)
        .catch((err: unknown) => c.log.error({ err, tiId: a.tiId }, 'could not create the pod of an adopted attempt'));
    } else {
      void c.store.lost(
        a,
        `POD_GONE: no pod ${podName(a)} in namespace ${podNamespace(a, c.pods)} when this replica took the lead`,
        false,
      );
    }
  }
  return { adopted, deleted, recreated: missing.filter((a) => !running.has(a.tiId)).length };
}
