// The kubernetes executor's settings, read only when it is the replica's executor (a Lite replica
// is not asked for an image): names checked as Kubernetes checks them, before any pod is made.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { parseDuration } from '../../core/duration.js';
import { dns1123LabelProblem, dns1123SubdomainProblem } from '../../core/kubernetes-names.js';
import type { KubeconfigSource } from '../../executors/kubernetes/load-kube-config.js';
import { parsePodTemplate, type PodTemplate } from '../../executors/kubernetes/pod-template.js';
import { positiveDuration, list, nonEmpty } from './setting-parsers.js';
import type { SettingReader } from './settings.js';

/** The kubernetes executor's settings. Durations in ms. */
export interface KubernetesConfig {
  /** Namespace of the pods of tasks that name none. */
  namespace: string;
  /** The image pods run (the Leoflow image) unless a task names its own. */
  image: string;
  kubeconfig: KubeconfigSource;
  /** The control plane's API as pods reach it (e.g. the Service's name), given to `leoflow agent --server`
   *  (several, comma-separated, tried in turn). */
  serverUrl: string;
  /** The pod's program for `agent --once …` (the `leoflow` command on the image's PATH). */
  agentCommand: string[];
  /** A pod unschedulable for this long fails its attempt. */
  podPendingTimeoutMs: number;
  /** How long a finished pod is kept before it is deleted: succeeded (0: at once), failed. */
  keepSucceededMs: number;
  keepFailedMs: number;
  /** The Secret (and key) in the pods' namespace holding the agent token, so pod specs never
   *  carry it; null: the token is written into the pod's env (readable by whoever reads pods). */
  agentTokenSecret: { name: string; key: string } | null;
  /** A Secret or ConfigMap (and key) in the pods' namespace holding the CA that pods' agents verify
   *  the control plane with (LEOFLOW_CA_FILE); null: none mounted. */
  podCa: PodCaSource | null;
  /** What operators add to every task pod (--pod-template); null: nothing. */
  podTemplate: PodTemplate | null;
  /**
   * How many losses of one task spend no try (its node lost, its pod evicted): past them a loss
   * spends a try as any other, so a task that keeps losing its node does not retry for ever.
   */
  maxFreeRetries: number;
  /**
   * The control plane's own namespace (in-cluster, from the downward API), null when not given:
   * its Secrets (the database URL, the admin token) and its ServiceAccount are not for tasks, so no
   * task pod may run there (refused at start for the default namespace, at apply for a DAG's).
   */
  controlPlaneNamespace: string | null;
}

/** Where in the pods' namespace the CA for pods' agents is kept: a Secret's or ConfigMap's key. */
export interface PodCaSource {
  kind: 'secret' | 'configmap';
  name: string;
  key: string;
}

/** A namespace's name, as Kubernetes checks it (a DNS-1123 label). */
function dnsLabel(v: unknown): string {
  const s = nonEmpty(v);
  const why = dns1123LabelProblem(s);
  if (why) throw new Error(`${why}, got ${JSON.stringify(s)}`);
  return s;
}

/** The kubernetes executor's settings read and checked, with what it cannot go without. */
export function readKubernetesConfig({ pick, get, problems, cwd }: SettingReader): KubernetesConfig {
  const image = get(
    'kubernetes_image',
    (v) => {
      const s = nonEmpty(v);
      if (/\s/.test(s)) throw new Error(`must be an image reference without spaces, got ${JSON.stringify(s)}`);
      return s;
    },
    null as string | null,
  );
  if (image === 'required' || (image === null && pick('kubernetes_image') === undefined))
    problems.push(
      'the kubernetes executor needs the image its pods run (the Leoflow image): ' +
        'set --kubernetes-image or LEOFLOW_KUBERNETES_IMAGE',
    );
  const keep = (v: unknown) => {
    if (v === 0 || v === '0') return 0;
    const ms = parseDuration(v);
    if (ms > 24 * 86_400_000) throw new Error(`must be at most 24d, got ${JSON.stringify(v)}`);
    return ms;
  };
  const kubernetes: KubernetesConfig = {
    namespace: get('kubernetes_namespace', dnsLabel, 'default'),
    image: image ?? '',
    kubeconfig: get(
      'kubeconfig',
      (v): KubeconfigSource => {
        const s = nonEmpty(v);
        if (s === 'auto') return { kind: 'auto' };
        if (s === 'in-cluster') return { kind: 'in-cluster' };
        return { kind: 'file', path: path.resolve(cwd, s) };
      },
      { kind: 'auto' },
    ),
    // Usually one (the Service); several, separated by commas, are tried in turn by the pod's agent.
    serverUrl: get(
      'pod_server_url',
      (v) =>
        list(v)
          .map((s) => {
            let u: URL;
            try {
              u = new URL(s);
            } catch {
              throw new Error(
                `must be an http:// or https:// URL of the control plane as pods reach it (e.g. ` +
                  `http://leoflow:7070), got ${JSON.stringify(s)}`,
              );
            }
            if (u.protocol !== 'http:' && u.protocol !== 'https:')
              throw new Error(`must be an http:// or https:// URL, got protocol ${JSON.stringify(u.protocol)}`);
            return s;
          })
          .join(',') || nonEmpty(''),
      '',
    ),
    agentCommand: get(
      'pod_agent_command',
      (v) => {
        const l = list(v);
        if (l.length === 0) throw new Error('must name a program, e.g. leoflow');
        return l;
      },
      ['leoflow'],
    ),
    podPendingTimeoutMs: get('pod_pending_timeout', positiveDuration, 300_000),
    keepSucceededMs: get('pod_keep_succeeded', keep, 0),
    keepFailedMs: get('pod_keep_failed', keep, 3_600_000),
    agentTokenSecret: get(
      'pod_agent_token_secret',
      (v) => {
        const [name, key = 'agent-token', ...rest] = nonEmpty(v).split('/');
        const why = rest.length > 0 ? 'has more than one "/"' : dns1123SubdomainProblem(name!);
        if (why)
          throw new Error(
            `must be SECRET or SECRET/KEY (a Secret's name, a DNS-1123 subdomain), got ${JSON.stringify(v)}: ${why}`,
          );
        if (!/^[-._a-zA-Z0-9]+$/.test(key))
          throw new Error(`the key must be letters, digits, "-", "_" or ".", got ${JSON.stringify(key)}`);
        return { name: name!, key };
      },
      null as { name: string; key: string } | null,
    ),
    podCa: get(
      'pod_ca',
      (v): PodCaSource => {
        const m = /^(secret|configmap):([^/]+)(?:\/(.+))?$/.exec(nonEmpty(v));
        const why = !m
          ? 'is not of that form'
          : (dns1123SubdomainProblem(m[2]!) ??
            (m[3] !== undefined && !/^[-._a-zA-Z0-9]+$/.test(m[3])
              ? `the key must be letters, digits, "-", "_" or ".", got ${JSON.stringify(m[3])}`
              : null));
        if (why)
          throw new Error(
            `must be secret:NAME[/KEY] or configmap:NAME[/KEY] (the CA pods' agents verify the control plane ` +
              `with; KEY defaults to ca.crt), got ${JSON.stringify(v)}: ${why}`,
          );
        return { kind: m![1] as PodCaSource['kind'], name: m![2]!, key: m![3] ?? 'ca.crt' };
      },
      null as PodCaSource | null,
    ),
    podTemplate: get(
      'pod_template',
      (v) => {
        const file = path.resolve(cwd, nonEmpty(v));
        let text: string;
        try {
          text = readFileSync(file, 'utf8');
        } catch (err) {
          throw new Error(`cannot read ${file}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
        }
        try {
          return parsePodTemplate(text);
        } catch (err) {
          throw new Error(`${file}: ${(err as Error).message}`);
        }
      },
      null as PodTemplate | null,
    ),
    maxFreeRetries: get(
      'max_free_retries',
      (v) => {
        const n = typeof v === 'number' ? v : /^\d+$/.test(String(v).trim()) ? Number(String(v).trim()) : NaN;
        if (!Number.isSafeInteger(n) || n < 0 || n > 1000)
          throw new Error(`must be a whole number from 0 to 1000, got ${JSON.stringify(v)}`);
        return n;
      },
      3,
    ),
    controlPlaneNamespace: get('control_plane_namespace', dnsLabel, null as string | null),
  };
  if (kubernetes.controlPlaneNamespace !== null && kubernetes.controlPlaneNamespace === kubernetes.namespace)
    problems.push(
      `kubernetes_namespace ${JSON.stringify(kubernetes.namespace)} is the control plane's own namespace ` +
        `(--control-plane-namespace): task pods there could read its Secrets and run as its ServiceAccount; ` +
        `give tasks a namespace of their own (the Pro default is leoflow-tasks)`,
    );
  if (pick('pod_server_url') === undefined)
    problems.push(
      'the kubernetes executor needs the address pods reach the control plane at: ' +
        'set --pod-server-url or LEOFLOW_POD_SERVER_URL (e.g. http://leoflow:7070)',
    );
  return kubernetes;
}
