import { spawn, type ChildProcess } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import type { EventRecorder } from './event-recorder.js';
import { now } from './timestamp.js';
import type { KubeObject, ObjectStore } from './object-store.js';
import { containerEnv } from './container-env.js';
import { summarizeStatus } from './pod-status.js';
import { isValidImageReference } from './validate-pod.js';
import { resolveInImage, type ImageFilesystem } from './image-filesystem.js';

/**
 * The kubelet of every fake node: it pulls (by rule), resolves the env, and runs each container's
 * `command` + `args` as a LOCAL process in its own process group, with the container's env, and
 * reports what happens in the pod's status and in events, as a kubelet does: ContainerCreating,
 * ErrImagePull / ImagePullBackOff, InvalidImageName, CreateContainerConfigError, Running,
 * terminated with the exit code (Completed / Error), restarts per restartPolicy with
 * CrashLoopBackOff, and on deletion SIGTERM to the group, SIGKILL after the grace period, the final
 * status, then the pod's removal.
 */
export interface ImageRule {
  /** Pull fails with this message (ErrImagePull, then ImagePullBackOff, retried with backoff). */
  pullError?: string;
  /** ENTRYPOINT of the image, used when a container has no `command`. */
  entrypoint?: string[];
  /**
   * The image's executables: the command is resolved in them against the image's PATH (or the
   * container's own PATH env), as the runtime does; not found is a StartError. Without one, the
   * command is looked up on the host's PATH.
   */
  filesystem?: ImageFilesystem;
}

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

interface ContainerRuntime {
  name: string;
  child?: ChildProcess;
  pid?: number;
  containerId?: string;
  restartCount: number;
  logs: string;
  running: boolean;
  exited?: Promise<void>;
}

interface PodRuntime {
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

const LOG_LIMIT = 1 << 20;

export class FakeKubelet {
  private readonly pods = new Map<string, PodRuntime>();
  /** Images each node holds (`node\nimage`), for imagePullPolicy IfNotPresent and Never. */
  private readonly images = new Set<string>();
  /** Every process ever started and still alive, by pid, for close(). */
  private readonly live = new Map<number, ChildProcess>();

  constructor(
    private readonly store: ObjectStore,
    private readonly recorder: EventRecorder,
    private readonly opts: KubeletOptions,
  ) {}

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
    this.later(rt, this.opts.startDelayMs, () => {
      const ip = `10.244.0.${1 + (Number.parseInt(rt.uid.slice(0, 4), 16) % 250)}`;
      this.patchStatus(rt, (s, p) => {
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
      for (const c of pod.spec.containers) void this.runContainer(rt, c);
      const deadline = pod.spec.activeDeadlineSeconds;
      if (typeof deadline === 'number') this.later(rt, deadline * 1000, () => this.deadlineExceeded(rt));
    });
  }

  /** Preloads an image on a node, as for imagePullPolicy IfNotPresent or Never. */
  holdImage(node: string, image: string): void {
    this.images.add(`${node}\n${image}`);
  }

  /** activeDeadlineSeconds passed: the pod fails (DeadlineExceeded) and its containers are stopped with its grace period. */
  private deadlineExceeded(rt: PodRuntime): void {
    const message = 'Pod was active on the node longer than the specified deadline';
    this.event(rt, 'Normal', 'DeadlineExceeded', message);
    const pod = this.store.update('pods', rt.namespace, rt.name, (p) => {
      p.status.phase = 'Failed';
      p.status.reason = 'DeadlineExceeded';
      p.status.message = message;
    });
    rt.stopping = true;
    for (const t of rt.timers) clearTimeout(t);
    rt.timers.clear();
    for (const c of rt.containers.values()) {
      if (!c.running) continue;
      this.event(rt, 'Normal', 'Killing', `Stopping container ${c.name}`, c.name);
      signalGroup(c.pid, 'SIGTERM');
    }
    rt.killTimer = setTimeout(
      () => this.killAll(rt, 'SIGKILL'),
      (pod?.spec.terminationGracePeriodSeconds ?? 30) * 1000,
    );
    void Promise.all([...rt.containers.values()].map((c) => c.exited ?? Promise.resolve())).then(() => {
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
      rt.killTimer = setTimeout(() => this.killAll(rt, 'SIGKILL'), graceSeconds * 1000);
      return;
    }
    rt.deleting = true;
    rt.stopping = true;
    for (const t of rt.timers) clearTimeout(t);
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
    rt.killTimer = setTimeout(() => this.killAll(rt, 'SIGKILL'), graceSeconds * 1000);
    void this.finishWhenStopped(rt);
  }

  /** A force delete or a deletion from outside: the processes are killed, the object is already gone. */
  forget(namespace: string, name: string): void {
    const rt = this.pods.get(`${namespace}/${name}`);
    if (!rt) return;
    rt.stopping = true;
    rt.silent = true;
    for (const t of rt.timers) clearTimeout(t);
    if (rt.killTimer) clearTimeout(rt.killTimer);
    this.killAll(rt, 'SIGKILL');
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
      for (const t of rt.timers) clearTimeout(t);
      if (kill) this.killAll(rt, 'SIGKILL');
      lost.push(pod);
    }
    return lost;
  }

  /** SIGKILL to every process group started, and waits for each to be reaped. */
  async close(): Promise<void> {
    for (const rt of this.pods.values()) {
      rt.stopping = true;
      rt.silent = true;
      for (const t of rt.timers) clearTimeout(t);
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

  private killAll(rt: PodRuntime, signal: NodeJS.Signals): void {
    for (const c of rt.containers.values()) if (c.running) signalGroup(c.pid, signal);
  }

  private async finishWhenStopped(rt: PodRuntime): Promise<void> {
    await Promise.all([...rt.containers.values()].map((c) => c.exited ?? Promise.resolve()));
    if (rt.killTimer) clearTimeout(rt.killTimer);
    if (rt.silent) return;
    this.pods.delete(`${rt.namespace}/${rt.name}`);
    // The kubelet's last status (a terminal phase) and then its delete with grace 0.
    this.patchStatus(rt, () => undefined, true);
    this.store.remove('pods', rt.namespace, rt.name);
    this.opts.onFreed();
  }

  private later(rt: PodRuntime, ms: number, fn: () => void): void {
    if (rt.stopping) return;
    const t = setTimeout(() => {
      rt.timers.delete(t);
      if (!rt.stopping) fn();
    }, ms);
    rt.timers.add(t);
  }

  private sleep(rt: PodRuntime, ms: number): Promise<boolean> {
    return new Promise((resolve) => {
      if (rt.stopping) return resolve(false);
      const t = setTimeout(() => {
        rt.timers.delete(t);
        resolve(!rt.stopping);
      }, ms);
      rt.timers.add(t);
    });
  }

  private event(rt: PodRuntime, type: 'Normal' | 'Warning', reason: string, message: string, container?: string): void {
    const pod = this.store.get('pods', rt.namespace, rt.name);
    if (!pod) return;
    const e = { type, reason, message, component: 'kubelet' as const };
    this.recorder.record(pod, container ? { ...e, container } : e);
  }

  private setContainer(rt: PodRuntime, name: string, change: (cs: any) => void): void {
    this.patchStatus(rt, (s) => {
      const cs = (s.containerStatuses ?? []).find((x: any) => x.name === name);
      if (cs) change(cs);
    });
  }

  /** Runs one container through pull, config and start; restarts it per the pod's restartPolicy. */
  private async runContainer(rt: PodRuntime, spec: any): Promise<void> {
    const image: string = spec.image;
    if (!isValidImageReference(image)) {
      const msg = `Failed to apply default image tag "${image}": couldn't parse image name "${image}": invalid reference format`;
      this.event(rt, 'Warning', 'InspectFailed', msg, spec.name);
      this.event(rt, 'Warning', 'Failed', 'Error: InvalidImageName', spec.name);
      this.setContainer(rt, spec.name, (cs) => (cs.state = { waiting: { reason: 'InvalidImageName', message: msg } }));
      return;
    }
    if (!(await this.pull(rt, spec))) return;
    for (;;) {
      const env = await this.resolveEnv(rt, spec);
      if (env === undefined) return;
      const argv: string[] = [...(spec.command ?? this.opts.imageRule(image).entrypoint ?? []), ...(spec.args ?? [])];
      const c = rt.containers.get(spec.name)!;
      const exit = await this.start(rt, spec, c, argv, env);
      if (exit === undefined || rt.stopping) return;
      const policy = rt.stopping
        ? 'Never'
        : (this.store.get('pods', rt.namespace, rt.name)?.spec.restartPolicy ?? 'Always');
      if (policy === 'Never' || (policy === 'OnFailure' && exit === 0)) {
        this.afterContainerEnd(rt);
        return;
      }
      const delay = this.opts.backoffMs * 2 ** Math.min(c.restartCount, 8);
      const pod = this.store.get('pods', rt.namespace, rt.name);
      const who = `${spec.name} pod=${rt.name}_${rt.namespace}(${rt.uid})`;
      this.setContainer(rt, spec.name, (cs) => {
        cs.lastState = { terminated: cs.state.terminated };
        cs.state = {
          waiting: {
            reason: 'CrashLoopBackOff',
            message: `back-off ${Math.round(delay / 1000)}s restarting failed container=${who}`,
          },
        };
      });
      if (pod)
        this.event(
          rt,
          'Warning',
          'BackOff',
          `Back-off restarting failed container ${spec.name} in pod ${rt.name}_${rt.namespace}(${rt.uid})`,
          spec.name,
        );
      if (!(await this.sleep(rt, delay))) return;
      c.restartCount++;
      this.setContainer(rt, spec.name, (cs) => (cs.restartCount = c.restartCount));
    }
  }

  /** The image pull as imagePullPolicy says: Always pulls, IfNotPresent pulls once per node, Never never does. */
  private async pull(rt: PodRuntime, spec: any): Promise<boolean> {
    const image: string = spec.image;
    const key = `${rt.node}\n${image}`;
    const policy = spec.imagePullPolicy ?? 'IfNotPresent';
    if (policy !== 'Always' && this.images.has(key)) {
      this.event(rt, 'Normal', 'Pulled', `Container image "${image}" already present on machine`, spec.name);
      return true;
    }
    if (policy === 'Never') {
      const msg = `Container image "${image}" is not present with pull policy of Never`;
      this.event(rt, 'Warning', 'ErrImageNeverPull', msg, spec.name);
      this.event(rt, 'Warning', 'Failed', 'Error: ErrImageNeverPull', spec.name);
      this.setContainer(rt, spec.name, (cs) => (cs.state = { waiting: { reason: 'ErrImageNeverPull', message: msg } }));
      return false;
    }
    for (let attempt = 0; ; attempt++) {
      this.event(rt, 'Normal', 'Pulling', `Pulling image "${image}"`, spec.name);
      if (!(await this.sleep(rt, this.opts.pullDelayMs))) return false;
      const error = this.opts.imageRule(image).pullError;
      if (error === undefined) {
        this.images.add(key);
        this.event(
          rt,
          'Normal',
          'Pulled',
          `Successfully pulled image "${image}" in ${this.opts.pullDelayMs}ms (${this.opts.pullDelayMs}ms including waiting). Image size: 4194304 bytes.`,
          spec.name,
        );
        return true;
      }
      const msg = `Failed to pull image "${image}": ${error}`;
      this.event(rt, 'Warning', 'Failed', msg, spec.name);
      this.event(rt, 'Warning', 'Failed', 'Error: ErrImagePull', spec.name);
      this.setContainer(rt, spec.name, (cs) => (cs.state = { waiting: { reason: 'ErrImagePull', message: error } }));
      if (!(await this.sleep(rt, this.opts.backoffMs))) return false;
      this.event(rt, 'Normal', 'BackOff', `Back-off pulling image "${image}"`, spec.name);
      this.event(rt, 'Warning', 'Failed', 'Error: ImagePullBackOff', spec.name);
      this.setContainer(
        rt,
        spec.name,
        (cs) =>
          (cs.state = {
            waiting: {
              reason: 'ImagePullBackOff',
              message: `Back-off pulling image "${image}": ErrImagePull: ${error}`,
            },
          }),
      );
      if (!(await this.sleep(rt, this.opts.backoffMs * 2 ** Math.min(attempt, 8)))) return false;
    }
  }

  /** The container's env with valueFrom resolved; waits in CreateContainerConfigError while a source is missing. */
  private async resolveEnv(rt: PodRuntime, spec: any): Promise<Record<string, string> | undefined> {
    for (;;) {
      const pod = this.store.get('pods', rt.namespace, rt.name);
      if (!pod) return undefined;
      const resolved = containerEnv(pod, spec, {
        baseEnv: this.opts.baseEnv,
        secret: (name) => this.opts.secret(rt.namespace, name),
        configMap: (name) => this.opts.configMap(rt.namespace, name),
      });
      if ('env' in resolved) return resolved.env;
      const problem = resolved.problem;
      this.event(rt, 'Warning', 'Failed', `Error: ${problem}`, spec.name);
      this.setContainer(
        rt,
        spec.name,
        (cs) => (cs.state = { waiting: { reason: 'CreateContainerConfigError', message: problem } }),
      );
      if (!(await this.sleep(rt, this.opts.configRetryMs))) return undefined;
    }
  }

  /** Spawns the process; resolves with its exit code when it ends (undefined if never started or stopped). */
  private start(
    rt: PodRuntime,
    spec: any,
    c: ContainerRuntime,
    argv: string[],
    env: Record<string, string>,
  ): Promise<number | undefined> {
    const startError = (detail: string) => {
      const msg = `failed to create containerd task: failed to create shim task: OCI runtime create failed: runc create failed: unable to start container process: error during container init: ${detail}: unknown`;
      this.event(rt, 'Warning', 'Failed', `Error: ${msg}`, spec.name);
      this.setContainer(rt, spec.name, (cs) => {
        cs.state = {
          terminated: {
            exitCode: 128,
            reason: 'StartError',
            message: msg,
            startedAt: '1970-01-01T00:00:00Z',
            finishedAt: now(),
            containerID: cs.containerID,
          },
        };
      });
    };
    c.containerId = `containerd://${randomBytes(32).toString('hex')}`;
    this.event(rt, 'Normal', 'Created', `Created container: ${spec.name}`, spec.name);
    if (argv.length === 0) {
      startError(
        'exec: no command: the fake knows no ENTRYPOINT for this image (give the container a command, or the image an entrypoint with setImageRule)',
      );
      return Promise.resolve(1);
    }
    const filesystem = this.opts.imageRule(spec.image).filesystem;
    if (filesystem) {
      const ownPath = (spec.env ?? []).find((e: any) => e.name === 'PATH' && e.valueFrom == null)?.value;
      const resolved = resolveInImage(filesystem, argv, ownPath, spec.workingDir);
      if ('error' in resolved) {
        startError(resolved.error);
        return Promise.resolve(128);
      }
      argv = resolved.argv;
    }
    let child: ChildProcess;
    try {
      child = spawn(argv[0]!, argv.slice(1), {
        env,
        cwd: spec.workingDir || this.opts.cwd,
        detached: true,
        stdio: ['ignore', 'pipe', 'pipe'],
      });
    } catch (err) {
      startError(`exec: "${argv[0]}": ${(err as Error).message}`);
      return Promise.resolve(128);
    }
    return new Promise((resolve) => {
      let started = false;
      const keep = (chunk: Buffer) => {
        c.logs = (c.logs + chunk.toString()).slice(-LOG_LIMIT);
      };
      child.stdout!.on('data', keep);
      child.stderr!.on('data', keep);
      let markExited: () => void = () => undefined;
      c.exited = new Promise((r) => (markExited = r));
      child.once('error', (err: NodeJS.ErrnoException) => {
        if (started) return;
        c.running = false;
        markExited();
        if (!rt.silent)
          startError(
            err.code === 'ENOENT'
              ? `exec: "${argv[0]}": executable file not found in $PATH`
              : `exec: "${argv[0]}": ${err.message}`,
          );
        resolve(128);
      });
      child.once('spawn', () => {
        started = true;
        c.child = child;
        c.pid = child.pid!;
        c.running = true;
        this.live.set(child.pid!, child);
        const startedAt = now();
        this.event(rt, 'Normal', 'Started', `Started container ${spec.name}`, spec.name);
        this.setContainer(rt, spec.name, (cs) => {
          cs.state = { running: { startedAt } };
          cs.ready = true;
          cs.started = true;
          cs.containerID = c.containerId;
          cs.imageID = `docker.io/library/${spec.image.split(':')[0]}@sha256:${createHash('sha256').update(spec.image).digest('hex')}`;
        });
        if (rt.stopping) signalGroup(child.pid, 'SIGTERM'); // deleted while it was being started
        // When a container's first process ends, the container ends: whatever it left behind dies with it.
        child.once('exit', () => {
          signalGroup(child.pid, 'SIGKILL');
          // The output ends with the container, even if a process that left its group holds the pipes.
          setTimeout(() => {
            child.stdout?.destroy();
            child.stderr?.destroy();
          }, 500).unref();
        });
        child.once('close', (code, signal) => {
          this.live.delete(child.pid!);
          c.running = false;
          const exitCode = code ?? 128 + signalNumber(signal);
          if (!rt.silent) {
            this.setContainer(rt, spec.name, (cs) => {
              cs.state = {
                terminated: {
                  exitCode,
                  reason: exitCode === 0 ? 'Completed' : 'Error',
                  startedAt,
                  finishedAt: now(),
                  containerID: c.containerId,
                },
              };
              cs.ready = false;
              cs.started = false;
            });
          }
          markExited();
          resolve(exitCode);
        });
      });
    });
  }

  /** After a container ended for good: a terminal pod frees its node's resources. */
  private afterContainerEnd(rt: PodRuntime): void {
    const pod = this.store.get('pods', rt.namespace, rt.name);
    if (pod && (pod.status?.phase === 'Succeeded' || pod.status?.phase === 'Failed')) this.opts.onFreed();
  }

  /**
   * Changes the status and recomputes the phase and conditions from the containers, as the kubelet's
   * getPhase does: any container waiting (never run) → Pending; any running → Running; all stopped →
   * Succeeded if all exited 0, else Failed (Never), or Running while a restart is due.
   */
  private patchStatus(rt: PodRuntime, change: (status: any, pod: KubeObject) => void, final = false): void {
    this.store.update('pods', rt.namespace, rt.name, (p) => {
      const s = (p.status ??= { phase: 'Pending' });
      change(s, p);
      summarizeStatus(s, p.spec.restartPolicy ?? 'Always', final);
    });
  }
}

/** A signal to the process group the container's process leads (spawned detached); nothing when the group is gone. */
function signalGroup(pid: number | undefined, signal: NodeJS.Signals): void {
  if (pid === undefined) return;
  try {
    process.kill(-pid, signal);
  } catch {
    // the group is gone
  }
}

function signalNumber(signal: NodeJS.Signals | null): number {
  if (!signal) return 0;
  return (
    (
      {
        SIGHUP: 1,
        SIGINT: 2,
        SIGQUIT: 3,
        SIGABRT: 6,
        SIGKILL: 9,
        SIGSEGV: 11,
        SIGPIPE: 13,
        SIGALRM: 14,
        SIGTERM: 15,
      } as Record<string, number>
    )[signal] ?? 0
  );
}
