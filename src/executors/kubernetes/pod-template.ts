/**
 * The server-wide pod template (`--pod-template FILE`, e.g. a ConfigMap mounted as a file), read
 * from YAML or JSON, and any template laid over a task pod. What a template may hold, and its
 * checks, are in core/pod-template.ts: a DAG's `kubernetes.pod_template` is checked the same way.
 */
import type { V1Pod } from '@kubernetes/client-node';
import { parse } from 'yaml';
import { checkPodTemplate, type PodTemplate } from '../../core/pod-template.js';

export type { PodTemplate } from '../../core/pod-template.js';

/** The template in `text` (YAML or JSON), checked; throws with the field at fault. */
export function parsePodTemplate(text: string): PodTemplate {
  let doc: unknown;
  try {
    doc = parse(text);
  } catch (err) {
    throw new Error(`not YAML or JSON: ${(err as Error).message.split('\n')[0]}`);
  }
  return checkPodTemplate(doc);
}

/** The pod with the template's additions; Leoflow's own labels, volumes and mounts stay as they are. */
export function applyPodTemplate(pod: V1Pod, t: PodTemplate): V1Pod {
  const spec = pod.spec!;
  const task = spec.containers[0]!;
  const ownVolumes = new Set((spec.volumes ?? []).map((v) => v.name));
  return {
    ...pod,
    metadata: {
      ...pod.metadata,
      labels: { ...t.labels, ...pod.metadata?.labels },
      annotations: { ...t.annotations, ...pod.metadata?.annotations },
    },
    spec: {
      ...spec,
      ...(t.affinity ? { affinity: t.affinity } : {}),
      ...(t.priorityClassName ? { priorityClassName: t.priorityClassName } : {}),
      ...(t.imagePullSecrets ? { imagePullSecrets: t.imagePullSecrets } : {}),
      ...(t.securityContext ? { securityContext: t.securityContext } : {}),
      ...(t.volumes ? { volumes: [...(spec.volumes ?? []), ...t.volumes.filter((v) => !ownVolumes.has(v.name))] } : {}),
      containers: [
        {
          ...task,
          ...(t.container.securityContext ? { securityContext: t.container.securityContext } : {}),
          ...(t.container.volumeMounts
            ? { volumeMounts: [...(task.volumeMounts ?? []), ...t.container.volumeMounts] }
            : {}),
        },
        ...spec.containers.slice(1),
      ],
    },
  };
}
