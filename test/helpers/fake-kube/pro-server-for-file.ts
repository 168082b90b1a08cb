import { afterAll, beforeAll } from 'vitest';
import { freePort } from '../global-setup.js';
import { serverForFile, type ServerFixture } from '../server-fixture.js';
import type { FakeKubeApiOptions } from './fake-kube-api.js';
import { startFakeKubeApi, type FakeKubeApi } from './index.js';
import { proServerArgs } from './pro-server-args.js';

/** A Pro server whose kubernetes executor runs its pods on a fake API server of its own. */
export interface ProServerFixture extends ServerFixture {
  kube: FakeKubeApi;
}

/**
 * The way the Pro e2e files begin (`serverForFile` for the kubernetes executor): a fake API server
 * with `namespace`, then a Pro server on it with `args` after the Pro flags, both for the file.
 * `podsCannotConnect`: the pods are told an address where nothing listens, so their agents never
 * reach the control plane.
 */
export function proServerForFile(o: {
  namespace: string;
  kube?: FakeKubeApiOptions;
  args?: string[];
  podsCannotConnect?: boolean;
  tmpPrefix?: string;
}): ProServerFixture {
  let port = 0;
  let podServerUrl: string | undefined;
  beforeAll(async () => {
    f.kube = await startFakeKubeApi({ namespaces: [o.namespace], ...o.kube });
    port = await freePort();
    if (o.podsCannotConnect) podServerUrl = `http://127.0.0.1:${await freePort()}`;
  });
  afterAll(async () => {
    await f.kube?.close();
  });
  // Registered after the hooks above: vitest runs after-hooks last first, so the server stops
  // before its API server does.
  const f = serverForFile({
    tmpPrefix: o.tmpPrefix,
    args: () => [...proServerArgs({ port, kube: f.kube, namespace: o.namespace, podServerUrl }), ...(o.args ?? [])],
  }) as ProServerFixture;
  return f;
}
