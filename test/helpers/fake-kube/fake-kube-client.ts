/**
 * What the fake Kubernetes API's own tests (test/integration/fake-kube-api-*.test.ts) share: the
 * server as they start it, the real @kubernetes/client-node pointed at it, and small pod, polling
 * and refusal helpers.
 */
import * as k8s from '@kubernetes/client-node';
import { expect } from 'vitest';
import { startFakeKubeApi, type FakeKubeApi } from './index.js';

/** The fake API server and a CoreV1 client of it through its kubeconfig. */
export interface FakeKubeClient {
  api: FakeKubeApi;
  kc: k8s.KubeConfig;
  core: k8s.CoreV1Api;
}

/** Two namespaces (default, jobs), bookmarks every 100 ms, and a 100 ms crash-loop backoff. */
export async function startFakeKubeClient(): Promise<FakeKubeClient> {
  const api = await startFakeKubeApi({
    namespaces: ['default', 'jobs'],
    bookmarkIntervalMs: 100,
    timing: { backoffMs: 100 },
  });
  const kc = new k8s.KubeConfig();
  kc.loadFromFile(api.kubeconfigPath);
  return { api, kc, core: kc.makeApiClient(k8s.CoreV1Api) };
}

let seq = 0;
/** A name no other pod of this process has. */
export function uniqueName(prefix = 'p'): string {
  return `${prefix}-${++seq}-${Date.now().toString(36)}`;
}

/** A pod of one container `main` (busybox, `sleep 30`) that never restarts. */
export function pod(
  name: string,
  container: Partial<k8s.V1Container> = {},
  spec: Partial<k8s.V1PodSpec> = {},
  labels?: Record<string, string>,
): k8s.V1Pod {
  return {
    metadata: labels ? { name, labels } : { name },
    spec: {
      restartPolicy: 'Never',
      containers: [{ name: 'main', image: 'busybox:1.36', command: ['sh', '-c', 'sleep 30'], ...container }],
      ...spec,
    },
  };
}

/** Polls `get` every 20 ms until it returns a truthy value, or fails after `timeoutMs`. */
export async function until<T>(
  what: string,
  get: () => T | undefined | false | Promise<T | undefined | false>,
  timeoutMs = 10_000,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await get();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** The ApiException client-node throws, with its Status body parsed. */
export async function refusal(
  p: Promise<unknown>,
): Promise<{ code: number; body: any; headers: Record<string, string> }> {
  try {
    await p;
  } catch (err) {
    const e = err as k8s.ApiException<string>;
    return { code: e.code, body: typeof e.body === 'string' ? JSON.parse(e.body) : e.body, headers: e.headers };
  }
  throw new Error('the request succeeded');
}

/** `body` is a Failure Status of this code and reason, with a message. */
export function expectStatus(body: any, code: number, reason: string): void {
  expect(body).toMatchObject({ kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Failure', reason, code });
  expect(typeof body.message).toBe('string');
}
