/**
 * Pod Security admission as the API server enforces it on a namespace labelled
 * `pod-security.kubernetes.io/enforce: baseline|restricted` (version latest): each failed check
 * worded as k8s.io/pod-security-admission words it, all joined into one 403 Forbidden
 * `violates PodSecurity "restricted:latest": …`. The checks modelled are the ones a task pod can
 * meet: privileged, host namespaces and ports, hostPath and other volume types, privilege
 * escalation, capabilities, runAsNonRoot, runAsUser=0 and seccompProfile.
 */
export const ENFORCE_LABEL = 'pod-security.kubernetes.io/enforce';

/** Volume sources the restricted level allows. */
const RESTRICTED_VOLUMES = [
  'configMap',
  'csi',
  'downwardAPI',
  'emptyDir',
  'ephemeral',
  'persistentVolumeClaim',
  'projected',
  'secret',
];

const quoteList = (xs: string[]) => xs.map((x) => `"${x}"`).join(', ');
const containersOf = (spec: any): any[] => [...(spec.initContainers ?? []), ...(spec.containers ?? [])];

/** The violations of `level` by a pod (empty when it passes), in the admission's order. */
export function podSecurityViolations(pod: any, level: string): string[] {
  if (level !== 'baseline' && level !== 'restricted') return [];
  const spec = pod.spec ?? {};
  const out: string[] = [];
  const cs = containersOf(spec);
  const privileged = cs.filter((c) => c.securityContext?.privileged === true).map((c) => c.name);
  if (privileged.length)
    out.push(
      `privileged (${privileged.map((n) => `container "${n}"`).join(', ')} must not set securityContext.privileged=true)`,
    );
  const hostNs = (['hostNetwork', 'hostPID', 'hostIPC'] as const)
    .filter((k) => spec[k] === true)
    .map((k) => `${k}=true`);
  if (hostNs.length) out.push(`host namespaces (${hostNs.join(', ')})`);
  const hostPorts = cs.flatMap((c) =>
    (c.ports ?? []).filter((p: any) => p.hostPort).map((p: any) => String(p.hostPort)),
  );
  if (hostPorts.length) out.push(`hostPort (container uses hostPorts ${hostPorts.join(', ')})`);
  const hostPath = (spec.volumes ?? []).filter((v: any) => v.hostPath).map((v: any) => v.name);
  if (hostPath.length) out.push(`hostPath volumes (volume ${quoteList(hostPath)})`);
  if (level === 'baseline') return out;
  const badVolumes = (spec.volumes ?? []).filter(
    (v: any) => !v.hostPath && !Object.keys(v).some((k) => RESTRICTED_VOLUMES.includes(k)),
  );
  if (badVolumes.length) {
    const types = badVolumes.map((v: any) => Object.keys(v).find((k) => k !== 'name') ?? 'unknown');
    out.push(
      `restricted volume types (volume ${quoteList(badVolumes.map((v: any) => v.name))} uses restricted volume type ${quoteList(types)})`,
    );
  }
  const escalating = cs.filter((c) => c.securityContext?.allowPrivilegeEscalation !== false).map((c) => c.name);
  if (escalating.length)
    out.push(
      `allowPrivilegeEscalation != false (${who(escalating)} must set securityContext.allowPrivilegeEscalation=false)`,
    );
  const caps: string[] = [];
  const noDrop = cs.filter((c) => !(c.securityContext?.capabilities?.drop ?? []).includes('ALL')).map((c) => c.name);
  if (noDrop.length) caps.push(`${who(noDrop)} must set securityContext.capabilities.drop=["ALL"]`);
  for (const c of cs) {
    const added = (c.securityContext?.capabilities?.add ?? []).filter((x: string) => x !== 'NET_BIND_SERVICE');
    if (added.length)
      caps.push(`container "${c.name}" must not include ${quoteList(added)} in securityContext.capabilities.add`);
  }
  if (caps.length) out.push(`unrestricted capabilities (${caps.join('; ')})`);
  const podNonRoot = spec.securityContext?.runAsNonRoot;
  const notNonRoot = cs.filter((c) => (c.securityContext?.runAsNonRoot ?? podNonRoot) !== true).map((c) => c.name);
  const explicitFalse = podNonRoot === false || cs.some((c) => c.securityContext?.runAsNonRoot === false);
  if (notNonRoot.length || explicitFalse) {
    out.push(
      podNonRoot === false
        ? 'runAsNonRoot != true (pod must not set securityContext.runAsNonRoot=false)'
        : `runAsNonRoot != true (pod or ${who(notNonRoot)} must set securityContext.runAsNonRoot=true)`,
    );
  }
  const root = cs.filter((c) => c.securityContext?.runAsUser === 0).map((c) => c.name);
  if (spec.securityContext?.runAsUser === 0) out.push('runAsUser=0 (pod must not set runAsUser=0)');
  else if (root.length) out.push(`runAsUser=0 (${who(root)} must not set runAsUser=0)`);
  const okSeccomp = (t: unknown) => t === 'RuntimeDefault' || t === 'Localhost';
  const podSeccomp = spec.securityContext?.seccompProfile?.type;
  const noSeccomp = cs
    .filter((c) => !okSeccomp(c.securityContext?.seccompProfile?.type ?? podSeccomp))
    .map((c) => c.name);
  if (noSeccomp.length)
    out.push(
      `seccompProfile (pod or ${who(noSeccomp)} must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")`,
    );
  return out;
}

function who(names: string[]): string {
  return names.length === 1 ? `container "${names[0]}"` : `containers ${quoteList(names)}`;
}

/** The 403's reason for a namespace's level, or undefined when the pod is admitted. */
export function podSecurityDenial(pod: any, namespaceLabels: Record<string, string> | undefined): string | undefined {
  const level = namespaceLabels?.[ENFORCE_LABEL];
  if (!level) return undefined;
  const v = podSecurityViolations(pod, level);
  return v.length ? `violates PodSecurity "${level}:latest": ${v.join(', ')}` : undefined;
}
