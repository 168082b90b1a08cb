import { spawn, type ChildProcess } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { resolveInImage } from './image-filesystem.js';
import type { ImageRule } from './image-pull.js';
import type { PodReporter } from './pod-reporter.js';
import type { ContainerRuntime, PodRuntime } from './pod-runtime.js';
import { signalGroup, signalNumber } from './process-group.js';
import { now } from './timestamp.js';

const LOG_LIMIT = 1 << 20;

export interface ContainerProcessOptions {
  reporter: PodReporter;
  imageRule: (image: string) => ImageRule;
  /** Working directory of a container without a workingDir. */
  cwd: string;
  /** Every process started and still alive, by pid: a started one is added, a reaped one removed. */
  live: Map<number, ChildProcess>;
}

/**
 * Spawns a container's process as the runtime would (its own process group, output kept); resolves
 * with its exit code when it ends (a StartError's code when it cannot start).
 */
export function startContainer(
  rt: PodRuntime,
  spec: any,
  c: ContainerRuntime,
  argv: string[],
  env: Record<string, string>,
  opts: ContainerProcessOptions,
): Promise<number | undefined> {
  const r = opts.reporter;
  const startError = (detail: string) => {
    const msg =
      'failed to create containerd task: failed to create shim task: OCI runtime create failed: runc create ' +
      `failed: unable to start container process: error during container init: ${detail}: unknown`;
    r.event(rt, 'Warning', 'Failed', `Error: ${msg}`, spec.name);
    r.setContainer(rt, spec.name, (cs) => {
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
  r.event(rt, 'Normal', 'Created', `Created container: ${spec.name}`, spec.name);
  if (argv.length === 0) {
    startError(
      'exec: no command: the fake knows no ENTRYPOINT for this image ' +
        '(give the container a command, or the image an entrypoint with setImageRule)',
    );
    return Promise.resolve(1);
  }
  const filesystem = opts.imageRule(spec.image).filesystem;
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
      cwd: spec.workingDir || opts.cwd,
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
      opts.live.set(child.pid!, child);
      const startedAt = now();
      r.event(rt, 'Normal', 'Started', `Started container ${spec.name}`, spec.name);
      const digest = createHash('sha256').update(spec.image).digest('hex');
      r.setContainer(rt, spec.name, (cs) => {
        cs.state = { running: { startedAt } };
        cs.ready = true;
        cs.started = true;
        cs.containerID = c.containerId;
        cs.imageID = `docker.io/library/${spec.image.split(':')[0]}@sha256:${digest}`;
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
        opts.live.delete(child.pid!);
        c.running = false;
        const exitCode = code ?? 128 + signalNumber(signal);
        if (!rt.silent) {
          r.setContainer(rt, spec.name, (cs) => {
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
