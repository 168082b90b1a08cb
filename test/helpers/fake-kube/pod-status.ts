import { now } from './timestamp.js';

/**
 * A pod's phase and conditions from its container statuses, as the kubelet's getPhase and its
 * condition generators compute them: any container waiting that never ran → Pending; any running
 * → Running; all stopped → Succeeded if all exited 0, else Failed under restartPolicy Never, or
 * Running while a restart is due. A terminal phase never goes back (since Kubernetes 1.27), and
 * `final` (the report after a deletion) ends containers still running or never started.
 */
export function summarizeStatus(s: any, policy: string, final: boolean): void {
  const statuses: any[] = s.containerStatuses ?? [];
  let waiting = 0;
  let running = 0;
  let stopped = 0;
  let succeeded = 0;
  for (const cs of statuses) {
    if (final && cs.state.running) {
      // Deletion ended it: the last report has it terminated by the signal.
      cs.state = {
        terminated: {
          exitCode: 137,
          reason: 'Error',
          startedAt: cs.state.running.startedAt,
          finishedAt: now(),
          containerID: cs.containerID,
        },
      };
    } else if (final && cs.state.waiting) {
      // Never started before the deletion: the kubelet reports it as it does since 1.27.
      cs.state = {
        terminated: {
          exitCode: 137,
          reason: 'ContainerStatusUnknown',
          message: 'The container could not be located when the pod was terminated',
          startedAt: null,
          finishedAt: null,
        },
      };
    }
    if (cs.state.running) running++;
    else if (cs.state.terminated) {
      stopped++;
      if (cs.state.terminated.exitCode === 0) succeeded++;
    } else if (cs.lastState?.terminated) stopped++;
    else waiting++;
  }
  let phase: string;
  if (final) phase = stopped > 0 && succeeded === stopped && waiting === 0 ? 'Succeeded' : 'Failed';
  else if (waiting > 0) phase = 'Pending';
  else if (running > 0) phase = 'Running';
  else if (stopped > 0) {
    if (policy === 'Always') phase = 'Running';
    else if (succeeded === stopped) phase = 'Succeeded';
    else if (policy === 'Never') phase = 'Failed';
    else phase = 'Running';
  } else phase = 'Pending';
  // A terminal phase never goes back (the kubelet's rule since 1.27).
  if (s.phase === 'Succeeded' || s.phase === 'Failed') phase = s.phase;
  s.phase = phase;
  const terminal = phase === 'Succeeded' || phase === 'Failed';
  const unready = statuses.filter((cs) => !cs.ready).map((cs) => cs.name);
  const ready = unready.length === 0 && statuses.length > 0;
  const readyCond = ready
    ? { status: 'True' }
    : terminal
      ? { status: 'False', reason: 'PodCompleted' }
      : {
          status: 'False',
          reason: 'ContainersNotReady',
          message: `containers with unready status: [${unready.join(' ')}]`,
        };
  const conds = new Map<string, any>((s.conditions ?? []).map((c: any) => [c.type, c]));
  const set = (type: string, v: any) => {
    const prev = conds.get(type);
    const same = prev && prev.status === v.status && prev.reason === v.reason;
    conds.set(type, { type, ...v, lastProbeTime: null, lastTransitionTime: same ? prev.lastTransitionTime : now() });
  };
  set('PodReadyToStartContainers', { status: terminal ? 'False' : 'True' });
  set('Initialized', { status: 'True' });
  set('Ready', readyCond);
  set('ContainersReady', readyCond);
  const order = ['PodReadyToStartContainers', 'Initialized', 'Ready', 'ContainersReady', 'PodScheduled'];
  s.conditions = [...conds.values()].sort((a, b) => order.indexOf(a.type) - order.indexOf(b.type));
}
