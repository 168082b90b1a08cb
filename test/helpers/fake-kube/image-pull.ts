import type { ImageFilesystem } from './image-filesystem.js';
import type { PodReporter } from './pod-reporter.js';
import { sleep, type PodRuntime } from './pod-runtime.js';

/** What the fake knows of an image: whether it pulls, its ENTRYPOINT and its files. */
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

export interface ImagePullOptions {
  /** How long a pull takes. */
  pullDelayMs: number;
  /** First back-off of a failed pull; doubles up to 8 times. */
  backoffMs: number;
  imageRule: (image: string) => ImageRule;
}

/** The images every fake node holds, and the kubelet's pull of a container's image. */
export class ImagePuller {
  /** Images each node holds (`node\nimage`), for imagePullPolicy IfNotPresent and Never. */
  private readonly images = new Set<string>();

  constructor(
    private readonly reporter: PodReporter,
    private readonly opts: ImagePullOptions,
  ) {}

  /** Preloads an image on a node, as for imagePullPolicy IfNotPresent or Never. */
  hold(node: string, image: string): void {
    this.images.add(`${node}\n${image}`);
  }

  /** The image pull as imagePullPolicy says: Always pulls, IfNotPresent pulls once per node, Never never does. */
  async pull(rt: PodRuntime, spec: any): Promise<boolean> {
    const r = this.reporter;
    const image: string = spec.image;
    const key = `${rt.node}\n${image}`;
    const policy = spec.imagePullPolicy ?? 'IfNotPresent';
    if (policy !== 'Always' && this.images.has(key)) {
      r.event(rt, 'Normal', 'Pulled', `Container image "${image}" already present on machine`, spec.name);
      return true;
    }
    if (policy === 'Never') {
      const msg = `Container image "${image}" is not present with pull policy of Never`;
      r.event(rt, 'Warning', 'ErrImageNeverPull', msg, spec.name);
      r.event(rt, 'Warning', 'Failed', 'Error: ErrImageNeverPull', spec.name);
      r.setContainer(rt, spec.name, (cs) => (cs.state = { waiting: { reason: 'ErrImageNeverPull', message: msg } }));
      return false;
    }
    for (let attempt = 0; ; attempt++) {
      r.event(rt, 'Normal', 'Pulling', `Pulling image "${image}"`, spec.name);
      if (!(await sleep(rt, this.opts.pullDelayMs))) return false;
      const error = this.opts.imageRule(image).pullError;
      if (error === undefined) {
        this.images.add(key);
        const ms = this.opts.pullDelayMs;
        const took = `in ${ms}ms (${ms}ms including waiting). Image size: 4194304 bytes.`;
        r.event(rt, 'Normal', 'Pulled', `Successfully pulled image "${image}" ${took}`, spec.name);
        return true;
      }
      const msg = `Failed to pull image "${image}": ${error}`;
      r.event(rt, 'Warning', 'Failed', msg, spec.name);
      r.event(rt, 'Warning', 'Failed', 'Error: ErrImagePull', spec.name);
      r.setContainer(rt, spec.name, (cs) => (cs.state = { waiting: { reason: 'ErrImagePull', message: error } }));
      if (!(await sleep(rt, this.opts.backoffMs))) return false;
      r.event(rt, 'Normal', 'BackOff', `Back-off pulling image "${image}"`, spec.name);
      r.event(rt, 'Warning', 'Failed', 'Error: ImagePullBackOff', spec.name);
      const backOff = `Back-off pulling image "${image}": ErrImagePull: ${error}`;
      r.setContainer(rt, spec.name, (cs) => (cs.state = { waiting: { reason: 'ImagePullBackOff', message: backOff } }));
      if (!(await sleep(rt, this.opts.backoffMs * 2 ** Math.min(attempt, 8)))) return false;
    }
  }
}
