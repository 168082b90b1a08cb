import { afterAll, beforeAll } from 'vitest';
import { startFakeKubeClient, type FakeKubeClient } from './fake-kube-client.js';

/**
 * The fake Kubernetes API of one test file and a client of it (`startFakeKubeClient`): started
 * beforeAll, closed afterAll. Its fields are set once beforeAll ran.
 */
export function fakeKubeClientForFile(): FakeKubeClient {
  const k = {} as FakeKubeClient;
  beforeAll(async () => {
    Object.assign(k, await startFakeKubeClient());
  });
  afterAll(async () => {
    await k.api?.close();
  });
  return k;
}
