import type { ChildProcess } from 'node:child_process';
import { signalGroup } from './process-group.js';

/** What the fake kubelet knows of one container it runs: its process, restarts and output. */
export interface ContainerRuntime {
  name: string;
  child?: ChildProcess;
  pid?: number;
  containerId?: string;
  restartCount: number;
  logs: string;
  running: boolean;
  exited?: Promise<void>;
}

/** What the fake kubelet knows of one pod bound to its node: containers and pending timers. */
export interface PodRuntime {
  namespace: string;
  name: string;
  node: string;
  uid: string;
  containers: Map<string, ContainerRuntime>;
  timers: Set<NodeJS.Timeout>;
  /** Set once deletion began, the deadline passed or the node was lost: nothing is started any more. */
  stopping: boolean;
  /** Set once a graceful deletion began. */
  deleting?: boolean;
  /** The node is lost: exits are not reported (no kubelet is left to report them). */
  silent: boolean;
  killTimer?: NodeJS.Timeout;
}

/** Runs `fn` after `ms` unless the pod is stopping by then. */
export function later(rt: PodRuntime, ms: number, fn: () => void): void {
  if (rt.stopping) return;
  const t = setTimeout(() => {
    rt.timers.delete(t);
    if (!rt.stopping) fn();
  }, ms);
  rt.timers.add(t);
}

/** Waits `ms`; false when the pod began stopping (before or during the wait). */
export function sleep(rt: PodRuntime, ms: number): Promise<boolean> {
  return new Promise((resolve) => {
    if (rt.stopping) return resolve(false);
    const t = setTimeout(() => {
      rt.timers.delete(t);
      resolve(!rt.stopping);
    }, ms);
    rt.timers.add(t);
  });
}

export function clearTimers(rt: PodRuntime): void {
  for (const t of rt.timers) clearTimeout(t);
}

export function killAll(rt: PodRuntime, signal: NodeJS.Signals): void {
  for (const c of rt.containers.values()) if (c.running) signalGroup(c.pid, signal);
}

/** Resolves once every container of the pod has exited (or never started). */
export function allExited(rt: PodRuntime): Promise<unknown> {
  return Promise.all([...rt.containers.values()].map((c) => c.exited ?? Promise.resolve()));
}
