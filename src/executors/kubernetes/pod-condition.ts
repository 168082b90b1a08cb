/**
 * What a pod's status says about its attempt, read from the phase, the conditions and the
 * containers' states: still coming (and why), never going to start (with the pod's own reason),
 * running, or over.
 */
import type { V1Pod } from '@kubernetes/client-node';

/** Container waiting reasons no wait will cure: the attempt fails at once, with this reason. */
export const CANNOT_START_REASONS: ReadonlySet<string> = new Set([
  'InvalidImageName',
  'ErrImageNeverPull',
  'CreateContainerConfigError',
]);

/** The kubelet's pull failures: permanent or not by the registry's answer, which the message quotes. */
const PULL_FAILURES: ReadonlySet<string> = new Set(['ErrImagePull', 'ImagePullBackOff']);

/**
 * A pull failure no wait will cure, as container runtimes quote the registry: the image or tag is
 * not there (`not found`, `manifest unknown`), not for these credentials (`pull access denied`,
 * `unauthorized`, 401/403), or not a valid reference. Anything else (a registry's 429
 * `toomanyrequests`, a 5xx, a timeout, a reset connection) may pass on the kubelet's next pull, so
 * the pod waits, bounded by the pending timeout.
 */
const PERMANENT_PULL_FAILURE = new RegExp(
  [
    'not found',
    'manifest unknown',
    'name unknown',
    'pull access denied',
    'unauthorized',
    'authorization failed',
    'authentication required',
    'forbidden',
    'invalid reference format',
    '\\b40[13]\\b',
  ].join('|'),
  'i',
);

export function isPermanentPullFailure(message: string | undefined): boolean {
  return PERMANENT_PULL_FAILURE.test(message ?? '');
}

export type PodCondition =
  /** Not running yet. `reason` is what the TI's pending reason says (null: nothing worth saying). */
  | { kind: 'pending'; reason: string | null; unschedulable: boolean }
  | { kind: 'cannot-start'; reason: string }
  | { kind: 'running' }
  | { kind: 'succeeded' }
  | { kind: 'failed'; reason: string }
  /** Its node stopped answering: the pod's fate is unknown. */
  | { kind: 'lost'; reason: string };

/** The name of the container that runs the attempt's agent (pod-manifest.ts); every other one is a sidecar. */
export const TASK_CONTAINER = 'task';

const cut = (s: string | undefined, n = 300) => (s ?? '').replace(/\s+/g, ' ').trim().slice(0, n);
export const withMessage = (reason: string, message: string | undefined) =>
  cut(message) === '' ? reason : `${reason}:${cut(message)}`;

/**
 * A graceful delete is confirmed by the pod's kubelet once the grace period (the deletionTimestamp)
 * has passed; a pod still there this long after it has no kubelet answering for it.
 */
export const STUCK_DELETION_MS = 10_000;

/** What the pod's status says now; `nowMs` (wall clock) decides whether its deletion is stuck. */
export function podCondition(pod: V1Pod, nowMs = Date.now()): PodCondition {
  const status = pod.status ?? {};
  const phase = status.phase ?? 'Pending';
  const containers = [...(status.initContainerStatuses ?? []), ...(status.containerStatuses ?? [])];
  if (phase === 'Unknown' || status.reason === 'NodeLost')
    return {
      kind: 'lost',
      reason: withMessage(status.reason ?? 'Unknown', status.message ?? 'the node of the pod stopped reporting'),
    };
  if (phase === 'Succeeded') return { kind: 'succeeded' };
  const stuck = stuckDeletion(pod, phase, nowMs);
  if (stuck) return { kind: 'lost', reason: stuck };
  // The task container's end is the attempt's end, though a sidecar (injected as a container,
  // e.g. a service mesh's proxy) keeps the pod Running.
  const task = (status.containerStatuses ?? []).find((c) => c.name === TASK_CONTAINER)?.state?.terminated;
  if (phase === 'Running' && task) return task.exitCode === 0 ? { kind: 'succeeded' } : terminatedFailure(task);
  if (phase === 'Running') {
    const lost = nodeLoss(status.conditions ?? [], containers);
    if (lost) return { kind: 'lost', reason: lost };
  }
  if (phase === 'Failed') {
    // The task container's own end first: a sidecar stopped by the kubelet after it says nothing.
    const term = [task, ...containers.map((c) => c.state?.terminated)].find((t) => t !== undefined);
    if (status.reason) return { kind: 'failed', reason: withMessage(status.reason, status.message) };
    if (term) return terminatedFailure(term);
    return { kind: 'failed', reason: withMessage('Failed', status.message) };
  }
  if (phase === 'Running') return { kind: 'running' };
  for (const c of containers) {
    const w = c.state?.waiting;
    if (
      w?.reason &&
      (CANNOT_START_REASONS.has(w.reason) || (PULL_FAILURES.has(w.reason) && isPermanentPullFailure(w.message)))
    )
      return { kind: 'cannot-start', reason: withMessage(w.reason, w.message) };
  }
  const scheduled = (status.conditions ?? []).find((c) => c.type === 'PodScheduled');
  if (scheduled?.status === 'False') {
    const reason = scheduled.reason ?? 'Unschedulable';
    return {
      kind: 'pending',
      reason: `POD_PENDING:${withMessage(reason, scheduled.message)}`,
      unschedulable: reason === 'Unschedulable',
    };
  }
  const waiting = containers.map((c) => c.state?.waiting).find((w) => w?.reason);
  return {
    kind: 'pending',
    reason: waiting?.reason ? `POD_PENDING:${withMessage(waiting.reason, waiting.message)}` : null,
    unschedulable: false,
  };
}

function terminatedFailure(term: { reason?: string; exitCode: number; message?: string }): PodCondition {
  return {
    kind: 'failed',
    reason: withMessage(term.reason ?? 'Error', `exit code ${term.exitCode}${term.message ? ` ${term.message}` : ''}`),
  };
}

/**
 * A deletion no kubelet confirms: the pod is on a node and not over, and its deletionTimestamp
 * (the end of its grace period) is more than STUCK_DELETION_MS ago. Kubernetes 1.27+ leaves such a
 * pod Terminating in phase Running for as long as its node does not answer.
 */
function stuckDeletion(pod: V1Pod, phase: string, nowMs: number): string | null {
  const at = pod.metadata?.deletionTimestamp;
  if (!at || phase === 'Failed' || !pod.spec?.nodeName) return null;
  const late = nowMs - new Date(at).getTime();
  if (!(late > STUCK_DELETION_MS)) return null;
  return withMessage(
    'DeletionNotConfirmed',
    `pod ${pod.metadata?.name} is still there ${Math.round(late / 1000)}s after its grace period ended: ` +
      `no kubelet on node ${pod.spec.nodeName} confirms its deletion`,
  );
}

/**
 * A running pod's node lost, as Kubernetes 1.27+ says it (the phase stays Running): the taint
 * manager's (or any) DisruptionTarget, or the node controller's Ready=False over containers whose
 * statuses, which only the kubelet writes, still say they run and are ready. A kubelet that saw a
 * container stop would have said so in its status; task pods have no readiness probes or gates.
 */
function nodeLoss(
  conditions: NonNullable<V1Pod['status']>['conditions'] & object,
  containers: NonNullable<NonNullable<V1Pod['status']>['containerStatuses']>,
): string | null {
  const disruption = conditions.find((c) => c.type === 'DisruptionTarget' && c.status === 'True');
  if (disruption) return withMessage(disruption.reason ?? 'DisruptionTarget', disruption.message);
  const ready = conditions.find((c) => c.type === 'Ready');
  if (ready?.status === 'False' && containers.length > 0 && containers.every((c) => c.ready && c.state?.running)) {
    return withMessage(
      'NodeNotReady',
      ready.message ?? "the pod's node stopped reporting (Ready=False while its containers' last status says they run)",
    );
  }
  return null;
}

/**
 * A pending reason that tells nothing the pod's events may not tell better: none, or the
 * kubelet's bare ContainerCreating / PodInitializing (a volume that does not mount shows only there).
 */
export function isGenericPending(reason: string | null): boolean {
  return reason === null || reason === 'POD_PENDING:ContainerCreating' || reason === 'POD_PENDING:PodInitializing';
}
