/**
 * The pod of one attempt: the edition's image (or the task's own) running `leoflow agent --once`
 * for exactly this attempt, which connects back to the control plane and runs the task's command
 * as any agent does. The task's `kubernetes:` block adds resources, namespace, service account,
 * node selector, tolerations and its own pod template over the server's. Its Kubernetes Secrets (a
 * task env entry's `secret: { kubernetes }`) are `secretKeyRef`s: no value is ever in the manifest.
 */
import type { V1Pod, V1Toleration } from '@kubernetes/client-node';
import type { Attempt } from '../../core/attempt.js';
import { INSTALL_LABEL } from './install-label.js';
import { mergePodTemplates } from '../../core/pod-template.js';
import { applyPodTemplate, type PodTemplate } from './pod-template.js';
import { ANNOTATION, podLabels, podName } from '../../core/pod-identity.js';
import { TASK_CONTAINER } from './pod-condition.js';

export interface PodSettings {
  /** This install's id (the database's), in every pod's labels and in the watches' selector. */
  install: string;
  /** Namespace of tasks that name none. */
  namespace: string;
  /** The Leoflow image, for tasks that name none. */
  image: string;
  /** The control plane's API as pods reach it. */
  serverUrl: string;
  /** The `leoflow` program in the image. */
  agentCommand: string[];
  /** Between SIGTERM and SIGKILL of the task inside the pod; the pod's grace period adds a margin. */
  killGraceMs: number;
  /**
   * Where pods read the deprecated shared agent token from (a Secret in their namespace); null:
   * none. The token itself is never written into a pod spec (anyone who may list pods would read
   * it): a pod's agent proves itself with its attempt's token.
   */
  agentTokenSecret?: { name: string; key: string } | null;
  /** A Secret or ConfigMap key in the pod's namespace holding the CA the pod's agent verifies an
   *  https:// serverUrl with; null: the image's system roots. */
  podCa?: { kind: 'secret' | 'configmap'; name: string; key: string } | null;
  /** What operators add to every pod (pod-template.ts); null: nothing. */
  podTemplate?: PodTemplate | null;
}

/** Where the CA is mounted in a pod (read-only), and the file the agent is pointed at. */
export const POD_CA_DIR = '/etc/leoflow/ca';
const POD_CA_FILE = 'ca.crt';

/** Time for the agent, once its task is stopped, to send the end and its last log lines. */
const REPORT_MARGIN_S = 5;

export function podNamespace(attempt: Attempt, s: Pick<PodSettings, 'namespace'>): string {
  return attempt.pod?.kubernetes?.namespace ?? s.namespace;
}

/** Seconds the pod is given between SIGTERM and SIGKILL when it is deleted. */
export function podGraceSeconds(killGraceMs: number): number {
  return Math.ceil(killGraceMs / 1000) + REPORT_MARGIN_S;
}

export function podManifest(attempt: Attempt, s: PodSettings): V1Pod {
  const k = attempt.pod?.kubernetes;
  const name = podName(attempt);
  const env = [
    // The task's Kubernetes Secrets, by reference: the kubelet gives the values to the pod, and the
    // agent inside reads each from its own environment under the variable's name. A missing Secret
    // or key keeps the pod from starting (CreateContainerConfigError), which fails the attempt.
    ...Object.entries(attempt.secretEnv ?? {}).flatMap(([name, ref]) =>
      'kubernetes' in ref
        ? [{ name, valueFrom: { secretKeyRef: { name: ref.kubernetes.name, key: ref.kubernetes.key } } }]
        : [],
    ),
    // The attempt this pod runs, and nothing else (agent --once, Hello.only_attempt_token).
    { name: 'LEOFLOW_ATTEMPT_TOKEN', value: attempt.attemptToken },
    ...(s.agentTokenSecret
      ? [
          {
            name: 'LEOFLOW_AGENT_TOKEN',
            valueFrom: { secretKeyRef: { name: s.agentTokenSecret.name, key: s.agentTokenSecret.key } },
          },
        ]
      : []),
    ...(s.podCa ? [{ name: 'LEOFLOW_CA_FILE', value: `${POD_CA_DIR}/${POD_CA_FILE}` }] : []),
  ];
  // Only the one key is projected, under a fixed name, so the Secret may hold other keys too.
  const caItems = s.podCa ? [{ key: s.podCa.key, path: POD_CA_FILE }] : [];
  const caVolume = s.podCa
    ? s.podCa.kind === 'secret'
      ? { name: 'leoflow-ca', secret: { secretName: s.podCa.name, items: caItems } }
      : { name: 'leoflow-ca', configMap: { name: s.podCa.name, items: caItems } }
    : null;
  const tolerations: V1Toleration[] | undefined = k?.tolerations?.map((t) => ({ ...t }));
  const pod: V1Pod = {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: {
      name,
      namespace: podNamespace(attempt, s),
      labels: { ...podLabels(attempt), [INSTALL_LABEL]: s.install },
      annotations: { [ANNOTATION.dag]: attempt.dagId, [ANNOTATION.task]: attempt.taskId },
    },
    spec: {
      // One pod per attempt: a retry is a new attempt, with a new pod, decided by the control plane.
      restartPolicy: 'Never',
      // Pod Security `restricted` by default: a namespace that enforces it admits task pods. The
      // image runs as a numeric non-root user (uid 10001), which runAsNonRoot needs to verify.
      securityContext: { runAsNonRoot: true, seccompProfile: { type: 'RuntimeDefault' } },
      terminationGracePeriodSeconds: podGraceSeconds(s.killGraceMs),
      ...(k?.serviceAccount ? { serviceAccountName: k.serviceAccount } : { automountServiceAccountToken: false }),
      ...(k?.nodeSelector ? { nodeSelector: { ...k.nodeSelector } } : {}),
      ...(tolerations ? { tolerations } : {}),
      ...(caVolume ? { volumes: [caVolume] } : {}),
      containers: [
        {
          name: TASK_CONTAINER,
          image: k?.image ?? attempt.pod?.image ?? s.image,
          command: [
            ...s.agentCommand,
            'agent',
            '--once',
            '--ti',
            attempt.tiId,
            '--server',
            s.serverUrl,
            '--id',
            name,
            // Deleting the pod (cancel, timeout) stops the task at once and reports it, rather
            // than letting it finish; the kill grace the control plane sends is the one used.
            '--on-shutdown',
            'handback',
            '--state-dir',
            `/tmp/leoflow/${name}`,
            '--log-format',
            'json',
          ],
          env,
          securityContext: { allowPrivilegeEscalation: false, capabilities: { drop: ['ALL'] } },
          ...(caVolume ? { volumeMounts: [{ name: caVolume.name, mountPath: POD_CA_DIR, readOnly: true }] } : {}),
          ...(k?.resources
            ? {
                resources: {
                  ...(k.resources.requests ? { requests: { ...k.resources.requests } } : {}),
                  ...(k.resources.limits ? { limits: { ...k.resources.limits } } : {}),
                },
              }
            : {}),
        },
      ],
    },
  };
  // The server's template, with the task's own laid over it.
  const template = mergePodTemplates(s.podTemplate ?? null, k?.podTemplate);
  return template ? applyPodTemplate(pod, template) : pod;
}
