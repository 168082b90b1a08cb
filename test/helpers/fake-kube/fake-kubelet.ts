import type { ChildProcess } from 'node:child_process';
import type { EventRecorder } from './event-recorder.js';
import { now } from './timestamp.js';
import type { KubeObject, ObjectStore } from './object-store.js';
import { ImagePuller, type ImageRule } from './image-pull.js';
import { PodReporter } from './pod-reporter.js';
import { allExited, clearTimers, killAll, later, type PodRuntime } from './pod-runtime.js';
import { signalGroup } from './process-group.js';
import { runContainer, type RunContainerOptions } from './run-container.js';

export type { ImageRule } from './image-pull.js';

/**
 * The kubelet of every fake node: it admits a bound pod, runs its containers (run-container.ts:
 * pull, env, a LOCAL process in its own group) and reports in the pod's status and events, as a
 * kubelet does; on deletion SIGTERM to each group, SIGKILL after the grace period, the final
 * status, then the pod's removal. activeDeadlineSeconds and a lost node end pods here too.
 */
export interface KubeletOptions {
  /** Delay between binding and the kubelet's first status (ContainerCreating). */
  startDelayMs: number;
  /** How long a pull takes. */
  pullDelayMs: number;
  /** First back-off of a failed pull or a crashed container; doubles up to 8 times. */
  backoffMs: number;
  /** How often a container held by CreateContainerConfigError is tried again. */
  configRetryMs: number;
  /** The rule for an image: by the test (setImageRule), else by convention (names containing `nonexistent` fail to pull). */
  imageRule: (image: string) => ImageRule;
  secret: (namespace: string, name: string) => Record<string, string> | undefined;
  configMap: (namespace: string, name: string) => Record<string, string> | undefined;
  /** Environment every container starts with (PATH, HOME...), before the container's own env. */
  baseEnv: Record<string, string>;
  cwd: string;
  /** Called when a pod's resources are freed (terminal or gone), for the scheduler. */
  onFreed: () => void;
}

export class FakeKubelet {
  private readonly pods = new Map<string, PodRuntime>();
  /** Every process ever started and still alive, by pid, for close(). */
  private readonly live = new Map<number, ChildProcess>();
  private readonly reporter: PodReporter;
  private readonly puller: ImagePuller;
  private readonly runOptions: RunContainerOptions;

  constructor(
    private readonly store: ObjectStore,
    private readonly recorder: EventRecorder,
    private readonly opts: KubeletOptions,
  ) {
    this.reporter = new PodReporter(store, recorder);
    this.puller = new ImagePuller(this.reporter, opts);
    this.runOptions = {
      ...opts,
      reporter: this.reporter,
      puller: this.puller,
      live: this.live,
      onEnded: (rt) => this.afterContainerEnd(rt),
    };
  }

  /** Pids of the container processes now alive. */
  pids(): number[] {
    return [...this.live.keys()];
  }

  logs(namespace: string, name: string, container?: string): string | undefined {
    const rt = this.pods.get(`${namespace}/${name}`);
    if (!rt) return undefined;
    const c = container ? rt.containers.get(container) : [...rt.containers.values()][0];
    return c?.logs;
  }

  /** The pod was bound to a node: start it. */
  admit(namespace: string, name: string): void {
    const pod = this.store.get('pods', namespace, name);
    if (!pod) return;
    const rt: PodRuntime = {
      namespace,
      name,
      node: pod.spec.nodeName ?? '',
      uid: pod.metadata.uid!,
      containers: new Map(),
      timers: new Set(),
      stopping: false,
      silent: false,
    };
    for (const c of pod.spec.containers)
      rt.containers.set(c.name, { name: c.name, restartCount: 0, logs: '', running: false });
    this.pods.set(`${namespace}/${name}`, rt);
    later(rt, this.opts.startDelayMs, () => {
      const ip = `10.244.0.${1 + (Number.parseInt(rt.uid.slice(0, 4), 16) % 250)}`;
      this.reporter.patchStatus(rt, (s, p) => {
        s.hostIP = '192.168.0.' + (1 + Number(p.spec.nodeName.replace(/\D/g, '') || 0));
        s.hostIPs = [{ ip: s.hostIP }];
        s.podIP = ip;
        s.podIPs = [{ ip }];
        s.startTime = now();
        s.containerStatuses = p.spec.containers.map((c: any) => ({
          name: c.name,
          state: { waiting: { reason: 'ContainerCreating' } },
          lastState: {},
          ready: false,
          restartCount: 0,
          image: c.image,
          imageID: '',
          started: false,
        }));
      });
      for (const c of pod.spec.containers) void runContainer(rt, c, this.runOptions);
      const deadline = pod.spec.activeDeadlineSeconds;
      if (typeof deadline === 'number') later(rt, deadline * 1000, () => this.deadlineExceeded(rt));
    });
  }

  /** Preloads an image on a node, as for imagePullPolicy IfNotPresent or Never. */
  holdImage(node: string, image: string): void {
    this.puller.hold(node, image);
  }

  /** activeDeadlineSeconds passed: the pod fails (DeadlineExceeded) and its containers are stopped with its grace period. */
  private deadlineExceeded(rt: PodRuntime): void {
    const message = 'Pod was active on the node longer than the specified deadline';
    this.reporter.event(rt, 'Normal', 'DeadlineExceeded', message);
    const pod = this.store.update('pods', rt.namespace, rt.name, (p) => {
      p.status.phase = 'Failed';
      p.status.reason = 'DeadlineExceeded';
      p.status.message = message;
    });
    rt.stopping = true;
    clearTimers(rt);
    rt.timers.clear();
    for (const c of rt.containers.values()) {
      if (!c.running) continue;
      this.reporter.event(rt, 'Normal', 'Killing', `Stopping container ${c.name}`, c.name);
      signalGroup(c.pid, 'SIGTERM');
    }
    rt.killTimer = setTimeout(() => killAll(rt, 'SIGKILL'), (pod?.spec.terminationGracePeriodSeconds ?? 30) * 1000);
    void allExited(rt).then(() => {
      if (rt.killTimer) clearTimeout(rt.killTimer);
      this.opts.onFreed();
    });
  }

  /**
   * Graceful deletion: SIGTERM to each running container's group, SIGKILL after `graceSeconds`,
   * then the final status and the pod's removal.
   */
  terminate(namespace: string, name: string, graceSeconds: number): void {
    const rt = this.pods.get(`${namespace}/${name}`);
    if (!rt) {
      this.store.remove('pods', namespace, name);
      this.opts.onFreed();
      return;
    }
    if (rt.silent) return; // No kubelet answers for a lost node: the pod stays Terminating until forced.
    if (rt.deleting) {
      // A second delete with a shorter grace shortens the wait, as the kubelet does.
      if (rt.killTimer) clearTimeout(rt.killTimer);
      rt.killTimer = setTimeout(() => killAll(rt, 'SIGKILL'), graceSeconds * 1000);
      return;
    }
    rt.deleting = true;
    rt.stopping = true;
    clearTimers(rt);
    rt.timers.clear();
    const pod = this.store.get('pods', namespace, name);
    for (const c of rt.containers.values()) {
      if (!c.running) continue;
      if (pod)
        this.recorder.record(pod, {
          type: 'Normal',
          reason: 'Killing',
          message: `Stopping container ${c.name}`,
          component: 'kubelet',
          container: c.name,
        });
      signalGroup(c.pid, 'SIGTERM');
    }
    rt.killTimer = setTimeout(() => killAll(rt, 'SIGKILL'), graceSeconds * 1000);
    void this.finishWhenStopped(rt);
  }

  /** A force delete or a deletion from outside: the processes are killed, the object is already gone. */
  forget(namespace: string, name: string): void {
    const rt = this.pods.get(`${namespace}/${name}`);
    if (!rt) return;
    rt.stopping = true;
    rt.silent = true;
    clearTimers(rt);
    if (rt.killTimer) clearTimeout(rt.killTimer);
    killAll(rt, 'SIGKILL');
    this.pods.delete(`${namespace}/${name}`);
  }

  /** The node of these pods is lost: its processes die with it (when `kill`) and nothing more is reported. */
  loseNode(nodeName: string, kill: boolean): KubeObject[] {
    const lost: KubeObject[] = [];
    for (const rt of this.pods.values()) {
      const pod = this.store.get('pods', rt.namespace, rt.name);
      if (!pod || pod.spec.nodeName !== nodeName) continue;
      rt.stopping = true;
      rt.silent = true;
      clearTimers(rt);
      if (kill) killAll(rt, 'SIGKILL');
      lost.push(pod);
    }
    return lost;
  }

  /** SIGKILL to every process group started, and waits for each to be reaped. */
  async close(): Promise<void> {
    for (const rt of this.pods.values()) {
      rt.stopping = true;
      rt.silent = true;
      clearTimers(rt);
      if (rt.killTimer) clearTimeout(rt.killTimer);
    }
    const waits = [...this.live.values()].map(
      (child) =>
        new Promise<void>((resolve) => {
          const done = () => {
            // A process that left the group may still hold the pipes: they are ours to close.
            child.stdout?.destroy();
            child.stderr?.destroy();
            resolve();
          };
          if (child.exitCode !== null || child.signalCode !== null) return done();
          child.once('exit', done);
        }),
    );
    for (const pid of this.live.keys()) signalGroup(pid, 'SIGKILL');
    await Promise.all(waits);
    this.pods.clear();
  }

  private async finishWhenStopped(rt: PodRuntime): Promise<void> {
    await allExited(rt);
    if (rt.killTimer) clearTimeout(rt.killTimer);
    if (rt.silent) return;
    this.pods.delete(`${rt.namespace}/${rt.name}`);
    // The kubelet's last status (a terminal phase) and then its delete with grace 0.
    this.reporter.patchStatus(rt, () => undefined, true);
    this.store.remove('pods', rt.namespace, rt.name);
    this.opts.onFreed();
  }

  /** After a container ended for good: a terminal pod frees its node's resources. */
  private afterContainerEnd(rt: PodRuntime): void {
    const pod = this.store.get('pods', rt.namespace, rt.name);
    if (pod && (pod.status?.phase === 'Succeeded' || pod.status?.phase === 'Failed')) this.opts.onFreed();
  }
}
