import type { KubeObject } from './object-store.js';

/**
 * A container's environment as the kubelet makes it: the base environment, HOSTNAME, then each
 * `env` entry in order, `$(VAR)` expanded from the ones before, `valueFrom` resolved from a
 * Secret, a ConfigMap, a field of the pod or a resource of a container. A missing source is the
 * problem the kubelet reports as CreateContainerConfigError (an `optional` reference is skipped).
 */
export interface EnvSources {
  baseEnv: Record<string, string>;
  secret: (name: string) => Record<string, string> | undefined;
  configMap: (name: string) => Record<string, string> | undefined;
}

export function containerEnv(
  pod: KubeObject,
  spec: any,
  sources: EnvSources,
): { env: Record<string, string> } | { problem: string } {
  const env: Record<string, string> = { ...sources.baseEnv, HOSTNAME: hostnameOf(pod.metadata.name) };
  for (const e of spec.env ?? []) {
    if (e.valueFrom === undefined || e.valueFrom === null) {
      env[e.name] = expandRefs(String(e.value ?? ''), env);
      continue;
    }
    const from = e.valueFrom;
    const ref = from.secretKeyRef ?? from.configMapKeyRef;
    if (ref) {
      const kind = from.secretKeyRef ? 'secret' : 'configmap';
      const data = from.secretKeyRef ? sources.secret(ref.name) : sources.configMap(ref.name);
      if (data === undefined) {
        if (ref.optional) continue;
        return { problem: `${kind} "${ref.name}" not found` };
      }
      if (!(ref.key in data)) {
        if (ref.optional) continue;
        return {
          problem: `couldn't find key ${ref.key} in ${from.secretKeyRef ? 'Secret' : 'ConfigMap'} ${pod.metadata.namespace}/${ref.name}`,
        };
      }
      env[e.name] = data[ref.key]!;
    } else if (from.fieldRef) {
      const value = fieldRefValue(pod, from.fieldRef.fieldPath);
      if (value === undefined) return { problem: `unsupported fieldPath: ${from.fieldRef.fieldPath}` };
      env[e.name] = value;
    } else if (from.resourceFieldRef) {
      const c = pod.spec.containers.find((x: any) => x.name === (from.resourceFieldRef.containerName || spec.name));
      const [kind, res] = String(from.resourceFieldRef.resource).split('.') as [string, string];
      env[e.name] = String(c?.resources?.[kind === 'limits' ? 'limits' : 'requests']?.[res] ?? '0');
    }
  }
  return { env };
}

/** The pod's hostname: its name cut to 63 characters, without a trailing '-' or '.' (the kubelet's rule). */
export function hostnameOf(podName: string): string {
  return podName.length <= 63 ? podName : podName.slice(0, 63).replace(/[-.]+$/, '');
}

/** `$(VAR)` references to earlier variables, as the kubelet expands them (`$$` escapes). */
function expandRefs(value: string, env: Record<string, string>): string {
  return value.replace(/\$\$|\$\(([-._a-zA-Z][-._a-zA-Z0-9]*)\)/g, (m, name: string | undefined) => {
    if (m === '$$') return '$';
    return name !== undefined && name in env ? env[name]! : m;
  });
}

function fieldRefValue(pod: KubeObject, path: string): string | undefined {
  const m = /^metadata\.(labels|annotations)\['(.+)'\]$/.exec(path);
  if (m) return pod.metadata[m[1]!]?.[m[2]!] ?? '';
  switch (path) {
    case 'metadata.name':
      return pod.metadata.name;
    case 'metadata.namespace':
      return pod.metadata.namespace;
    case 'metadata.uid':
      return pod.metadata.uid;
    case 'spec.nodeName':
      return pod.spec.nodeName ?? '';
    case 'spec.serviceAccountName':
      return pod.spec.serviceAccountName ?? '';
    case 'status.hostIP':
      return pod.status?.hostIP ?? '';
    case 'status.podIP':
      return pod.status?.podIP ?? '';
    default:
      return undefined;
  }
}
