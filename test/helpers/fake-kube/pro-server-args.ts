import type { FakeKubeApi } from './index.js';

/**
 * The flags of a Pro server listening on `port` whose kubernetes executor runs its pods on the
 * fake API server `kube` in `namespace`. Its pods call back to `podServerUrl`: by default this
 * server, over plain HTTP.
 */
export function proServerArgs(o: {
  port: number;
  kube: Pick<FakeKubeApi, 'kubeconfigPath'>;
  namespace: string;
  image?: string;
  podServerUrl?: string;
}): string[] {
  return [
    ...['--edition', 'pro', '--listen', `127.0.0.1:${o.port}`],
    ...['--kubeconfig', o.kube.kubeconfigPath, '--kubernetes-namespace', o.namespace],
    ...['--kubernetes-image', o.image ?? 'leoflow:test'],
    ...['--pod-server-url', o.podServerUrl ?? `http://127.0.0.1:${o.port}`],
  ];
}
