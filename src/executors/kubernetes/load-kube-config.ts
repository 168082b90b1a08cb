import type { KubeConfig } from '@kubernetes/client-node';
import { KeepAliveKubeConfig } from './keep-alive-kube-config.js';

/** Where the Kubernetes API's address and credentials come from. */
export type KubeconfigSource = { kind: 'auto' } | { kind: 'in-cluster' } | { kind: 'file'; path: string };

/**
 * The client's config: `auto` is client-node's own order ($KUBECONFIG, ~/.kube/config, else the
 * pod's service account); `in-cluster` is the service account only (its token and CA under
 * `/var/run/secrets/kubernetes.io/serviceaccount`, the API at $KUBERNETES_SERVICE_HOST); a file
 * is a kubeconfig. Fails with the source named when it yields no cluster to talk to. Its API calls
 * share keep-alive connections (keep-alive-kube-config.ts).
 */
export function loadKubeConfig(source: KubeconfigSource, serviceAccountRoot = ''): KubeConfig {
  const kc = new KeepAliveKubeConfig();
  try {
    if (source.kind === 'file') kc.loadFromFile(source.path);
    else if (source.kind === 'in-cluster') {
      if (!process.env.KUBERNETES_SERVICE_HOST)
        throw new Error('KUBERNETES_SERVICE_HOST is not set: this process does not run in a pod');
      kc.loadFromCluster(serviceAccountRoot);
    } else kc.loadFromDefault();
  } catch (err) {
    throw new Error(`kubeconfig (${source.kind === 'file' ? source.path : source.kind}): ${(err as Error).message}`, {
      cause: err,
    });
  }
  const cluster = kc.getCurrentCluster();
  if (!cluster)
    throw new Error(`kubeconfig (${source.kind === 'file' ? source.path : source.kind}): no current cluster`);
  return kc;
}
