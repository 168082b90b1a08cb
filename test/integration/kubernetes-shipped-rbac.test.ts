import { execFileSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { pino } from 'pino';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { parseAllDocuments, parseDocument } from 'yaml';
import type { AttemptResult } from '../../src/core/attempt.js';
import { podName } from '../../src/core/pod-identity.js';
import {
  createKubernetesExecutor,
  type KubernetesExecutor,
} from '../../src/executors/kubernetes/kubernetes-executor.js';
import { loadKubeConfig } from '../../src/executors/kubernetes/load-kube-config.js';
import { parseDuration } from '../../src/core/duration.js';
import type { AccessRule } from '../helpers/fake-kube/access-control.js';
import { startFakeKubeApi, type FakeKubeApi } from '../helpers/fake-kube/index.js';
import { endsReporter, taskContainer, testAttempt } from '../helpers/fake-kube/test-executor.js';
import { ROOT, waitFor } from '../helpers/leoflow-process.js';

/**
 * The kubernetes executor on the shipped RBAC alone (editions/pro/kubernetes, as `kubectl
 * kustomize` builds it): the control plane's ServiceAccount gets exactly the rules of the Roles
 * bound to it, in their namespaces, and the executor runs with the shipped tasks' namespace and
 * kill grace (editions/pro/config.json). Everything it does in the tasks' namespace is allowed;
 * nothing at all is in the control plane's own.
 */

type Obj = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any
const DIR = path.join(ROOT, 'editions/pro/kubernetes');
const pro = JSON.parse(readFileSync(path.join(ROOT, 'editions/pro/config.json'), 'utf8')) as Record<string, string>;

/** The base as kubectl builds it, or its files as listed where there is no kubectl. */
function shippedObjects(): Obj[] {
  try {
    const out = execFileSync('kubectl', ['kustomize', DIR], { encoding: 'utf8' });
    return parseAllDocuments(out).map((d) => d.toJS() as Obj);
  } catch {
    const k = parseDocument(readFileSync(path.join(DIR, 'kustomization.yaml'), 'utf8')).toJS() as Obj;
    return (k.resources as string[]).map((f) => parseDocument(readFileSync(path.join(DIR, f), 'utf8')).toJS() as Obj);
  }
}

const objects = shippedObjects();
const deployment = objects.find((o) => o.kind === 'Deployment')!;
const CONTROL_PLANE_NS = deployment.metadata.namespace as string;
const SERVICE_ACCOUNT = deployment.spec.template.spec.serviceAccountName as string;
const TASKS_NS = pro.kubernetes_namespace!;

/** The rules RBAC gives the control plane's ServiceAccount: every Role bound to it, in its namespace. */
function shippedRules(): AccessRule[] {
  const bound = objects.filter(
    (o) =>
      o.kind === 'RoleBinding' &&
      (o.subjects as Obj[]).some(
        (s) => s.kind === 'ServiceAccount' && s.name === SERVICE_ACCOUNT && s.namespace === CONTROL_PLANE_NS,
      ),
  );
  expect(objects.filter((o) => o.kind === 'ClusterRoleBinding')).toEqual([]);
  return bound.flatMap((b) => {
    const role = objects.find(
      (o) => o.kind === 'Role' && o.metadata.name === b.roleRef.name && o.metadata.namespace === b.metadata.namespace,
    )!;
    return (role.rules as Obj[]).map((r) => ({
      verbs: r.verbs,
      resources: r.resources,
      namespaces: [role.metadata.namespace],
    }));
  });
}

let kube: FakeKubeApi;
let ex: KubernetesExecutor | undefined;
beforeEach(async () => {
  kube = await startFakeKubeApi({ namespaces: [CONTROL_PLANE_NS, TASKS_NS], kubelet: 'manual' });
});
afterEach(async () => {
  await ex?.shutdown(0);
  ex = undefined;
  await kube.close();
});

const attempt = testAttempt;

const terminated = (exitCode: number) => ({
  phase: 'Failed',
  containerStatuses: [taskContainer({ terminated: { exitCode, reason: 'Error' } })],
});

describe('the shipped RBAC', () => {
  it("is all the executor needs in the tasks' namespace, and gives nothing in the control plane's", async () => {
    expect(TASKS_NS).not.toBe(CONTROL_PLANE_NS);
    kube.grantToken('shipped', shippedRules(), `system:serviceaccount:${CONTROL_PLANE_NS}:${SERVICE_ACCOUNT}`);
    const finished: { tiId: string; result: AttemptResult }[] = [];
    const lost: string[] = [];
    ex = createKubernetesExecutor({
      kubeConfig: loadKubeConfig({ kind: 'file', path: await kube.kubeconfigFor('shipped') }),
      pods: {
        install: 'install-a',
        namespace: TASKS_NS,
        image: 'leoflow:test',
        serverUrl: pro.pod_server_url!,
        agentCommand: ['leoflow'],
        killGraceMs: parseDuration(pro.kill_grace!),
        podPendingTimeoutMs: 300_000,
        keepSucceededMs: 0,
        keepFailedMs: 3_600_000,
      },
      reporter: endsReporter((a, result) => void finished.push({ tiId: a.tiId, result })),
      store: {
        lost: async (a) => (lost.push(a.tiId), true),
        pending: async () => {},
        active: async () => [],
        podGone: async () => {},
        lastLines: async () => [],
        standings: async (attempts) => new Map(attempts.map((a) => [a.tiId, 'queued' as const])),
      },
      logger: pino({ level: process.env.KLOG ?? 'silent' }),
      pendingEventsMs: 50,
    });
    await ex.lead(true);
    // A pod that waits (its events listed), one cancelled (deleted), one retried (the earlier try
    // deleted and seen gone), one that failed before its agent reported (its log read).
    const waits = attempt();
    const cancelled = attempt();
    const first = attempt();
    const failed = attempt();
    for (const a of [waits, cancelled, first, failed]) await ex.dispatch(a);
    kube.bindPod(TASKS_NS, podName(waits));
    kube.setPodStatus(TASKS_NS, podName(waits), {
      phase: 'Pending',
      containerStatuses: [taskContainer({ waiting: { reason: 'ContainerCreating' } })],
    });
    expect(ex.cancel(cancelled.tiId, 'cancelled')).toBe(true);
    await ex.dispatch({ ...first, tryNumber: 2, attemptToken: randomUUID() });
    kube.bindPod(TASKS_NS, podName(failed));
    kube.setPodStatus(TASKS_NS, podName(failed), terminated(127));
    await waitFor('the failed pod ended its attempt', async () => lost.includes(failed.tiId));
    await waitFor('the retry created', async () => kube.requests().filter((r) => r.verb === 'create').length === 5);
    await waitFor('events listed', async () => kube.requests().some((r) => r.resource === 'events'));
    const used = new Set(kube.requests().map((r) => `${r.resource}:${r.verb}`));
    for (const need of ['pods:create', 'pods:list', 'pods:watch', 'pods:delete', 'pods/log:get', 'events:list'])
      expect(used, need).toContain(need);
    expect(kube.requests().filter((r) => r.status === 403)).toEqual([]);
    expect(new Set(kube.requests().map((r) => r.namespace)), "every call in the tasks' namespace").toEqual(
      new Set([TASKS_NS]),
    );
    // A pod in the control plane's namespace (a DAG the server's check missed) is refused by RBAC.
    const intruder = attempt({ pod: { image: null, kubernetes: { namespace: CONTROL_PLANE_NS } } });
    await ex.dispatch(intruder).catch(() => {});
    await waitFor('refused', async () => finished.some((f) => f.tiId === intruder.tiId), 15_000);
    expect(finished.find((f) => f.tiId === intruder.tiId)!.result.error).toMatch(/^POD_CREATE_REFUSED:403|403/);
    expect(kube.pod(CONTROL_PLANE_NS, podName(intruder))).toBeUndefined();
  }, 60_000);
});
