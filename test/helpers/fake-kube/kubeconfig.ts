import { randomBytes } from 'node:crypto';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';

/** Where a fake API server is reached: its URL and, when it serves HTTPS, the CA that signed it. */
export interface ApiServerAddress {
  url: string;
  /** The certificate (PEM) a client must trust; undefined for plain HTTP. */
  caPem: string | undefined;
}

/** Writes a kubeconfig file in `dir` for the server and `token`, its context selected; returns its path. */
export async function writeKubeconfig(
  dir: string,
  server: ApiServerAddress,
  token: string,
  name: string,
): Promise<string> {
  const config = {
    apiVersion: 'v1',
    kind: 'Config',
    clusters: [
      {
        name: 'fake',
        cluster:
          server.caPem !== undefined
            ? { server: server.url, 'certificate-authority-data': Buffer.from(server.caPem).toString('base64') }
            : { server: server.url, 'insecure-skip-tls-verify': true },
      },
    ],
    users: [{ name, user: { token } }],
    contexts: [{ name: 'fake', context: { cluster: 'fake', user: name, namespace: 'default' } }],
    'current-context': 'fake',
  };
  const path = join(dir, `kubeconfig-${name}.json`);
  await writeFile(path, JSON.stringify(config, null, 2));
  return path;
}

/**
 * Writes what a pod's service account mount would hold (token, ca.crt, namespace) under a new
 * prefix in `dir`, for `KubeConfig.loadFromCluster(pathPrefix)`, with the env that goes with it.
 */
export async function writeServiceAccountMount(
  dir: string,
  server: ApiServerAddress & { caPem: string },
  token: string,
  namespace: string,
): Promise<{ pathPrefix: string; env: { KUBERNETES_SERVICE_HOST: string; KUBERNETES_SERVICE_PORT: string } }> {
  const pathPrefix = join(dir, `in-cluster-${randomBytes(4).toString('hex')}`);
  const mount = join(pathPrefix, 'var/run/secrets/kubernetes.io/serviceaccount');
  await mkdir(mount, { recursive: true });
  await writeFile(join(mount, 'token'), token);
  await writeFile(join(mount, 'ca.crt'), server.caPem);
  await writeFile(join(mount, 'namespace'), namespace);
  const port = new URL(server.url).port;
  return { pathPrefix, env: { KUBERNETES_SERVICE_HOST: '127.0.0.1', KUBERNETES_SERVICE_PORT: port } };
}
