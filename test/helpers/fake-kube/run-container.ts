import type { ChildProcess } from 'node:child_process';
import { containerEnv } from './container-env.js';
import { startContainer } from './container-process.js';
import type { ImagePuller, ImageRule } from './image-pull.js';
import type { PodReporter } from './pod-reporter.js';
import { sleep, type PodRuntime } from './pod-runtime.js';
import { isValidImageReference } from './validate-pod.js';

export interface RunContainerOptions {
  reporter: PodReporter;
  puller: ImagePuller;
  imageRule: (image: string) => ImageRule;
  /** First back-off of a crashed container; doubles up to 8 times. */
  backoffMs: number;
  /** How often a container held by CreateContainerConfigError is tried again. */
  configRetryMs: number;
  secret: (namespace: string, name: string) => Record<string, string> | undefined;
  configMap: (namespace: string, name: string) => Record<string, string> | undefined;
  baseEnv: Record<string, string>;
  cwd: string;
  live: Map<number, ChildProcess>;
  /** The container ended for good (its restartPolicy restarts it no more). */
  onEnded: (rt: PodRuntime) => void;
}

/** Runs one container through pull, config and start; restarts it per the pod's restartPolicy. */
export async function runContainer(rt: PodRuntime, spec: any, opts: RunContainerOptions): Promise<void> {
  const r = opts.reporter;
  const image: string = spec.image;
  if (!isValidImageReference(image)) {
    const msg =
      `Failed to apply default image tag "${image}": ` +
      `couldn't parse image name "${image}": invalid reference format`;
    r.event(rt, 'Warning', 'InspectFailed', msg, spec.name);
    r.event(rt, 'Warning', 'Failed', 'Error: InvalidImageName', spec.name);
    r.setContainer(rt, spec.name, (cs) => (cs.state = { waiting: { reason: 'InvalidImageName', message: msg } }));
    return;
  }
  if (!(await opts.puller.pull(rt, spec))) return;
  for (;;) {
    const env = await resolveEnv(rt, spec, opts);
    if (env === undefined) return;
    const argv: string[] = [...(spec.command ?? opts.imageRule(image).entrypoint ?? []), ...(spec.args ?? [])];
    const c = rt.containers.get(spec.name)!;
    const exit = await startContainer(rt, spec, c, argv, env, opts);
    if (exit === undefined || rt.stopping) return;
    const policy = rt.stopping ? 'Never' : (r.store.get('pods', rt.namespace, rt.name)?.spec.restartPolicy ?? 'Always');
    if (policy === 'Never' || (policy === 'OnFailure' && exit === 0)) {
      opts.onEnded(rt);
      return;
    }
    const delay = opts.backoffMs * 2 ** Math.min(c.restartCount, 8);
    const pod = r.store.get('pods', rt.namespace, rt.name);
    const who = `${spec.name} pod=${rt.name}_${rt.namespace}(${rt.uid})`;
    r.setContainer(rt, spec.name, (cs) => {
      cs.lastState = { terminated: cs.state.terminated };
      cs.state = {
        waiting: {
          reason: 'CrashLoopBackOff',
          message: `back-off ${Math.round(delay / 1000)}s restarting failed container=${who}`,
        },
      };
    });
    if (pod)
      r.event(
        rt,
        'Warning',
        'BackOff',
        `Back-off restarting failed container ${spec.name} in pod ${rt.name}_${rt.namespace}(${rt.uid})`,
        spec.name,
      );
    if (!(await sleep(rt, delay))) return;
    c.restartCount++;
    r.setContainer(rt, spec.name, (cs) => (cs.restartCount = c.restartCount));
  }
}

/** The container's env with valueFrom resolved; waits in CreateContainerConfigError while a source is missing. */
async function resolveEnv(
  rt: PodRuntime,
  spec: any,
  opts: RunContainerOptions,
): Promise<Record<string, string> | undefined> {
  const r = opts.reporter;
  for (;;) {
    const pod = r.store.get('pods', rt.namespace, rt.name);
    if (!pod) return undefined;
    const resolved = containerEnv(pod, spec, {
      baseEnv: opts.baseEnv,
      secret: (name) => opts.secret(rt.namespace, name),
      configMap: (name) => opts.configMap(rt.namespace, name),
    });
    if ('env' in resolved) return resolved.env;
    const problem = resolved.problem;
    r.event(rt, 'Warning', 'Failed', `Error: ${problem}`, spec.name);
    r.setContainer(
      rt,
      spec.name,
      (cs) => (cs.state = { waiting: { reason: 'CreateContainerConfigError', message: problem } }),
    );
    if (!(await sleep(rt, opts.configRetryMs))) return undefined;
  }
}
