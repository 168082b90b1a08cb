import { randomUUID } from 'node:crypto';
import { loadKubeConfig } from '../../src/executors/kubernetes/load-kube-config.js';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { Attempt, AttemptResult } from '../../src/core/attempt.js';
import {
  createKubernetesExecutor,
  type KubernetesExecutor,
} from '../../src/executors/kubernetes/kubernetes-executor.js';
import type { KubernetesExecutorOptions } from '../../src/executors/kubernetes/kubernetes-executor-options.js';
import { podName } from '../../src/core/pod-identity.js';
import {
  endsReporter,
  podSettings,
  runningPodStatus,
  taskContainer,
  testAttempt,
} from '../helpers/fake-kube/test-executor.js';
import { startFakeKubeApi, type FakeKubeApi } from '../helpers/fake-kube/index.js';
import { waitFor } from '../helpers/leoflow-process.js';
import { pino } from 'pino';

/**
 * The kubernetes executor on its own, through the real client-node, against the fake API server
 * with its kubelet in manual mode: the test moves each pod, and checks what the executor writes
 * (through a recording store) and sends to the API server.
 */

const NS = 'jobs';
let kube: FakeKubeApi;
const executors: KubernetesExecutor[] = [];
/** The lines each attempt's agent delivered before its pod ended (by TI id), as the store has them. */
const taskLines = new Map<string, string[]>();

interface Recorded {
  finished: { tiId: string; result: AttemptResult }[];
  lost: { tiId: string; tryNumber: number; error: string; free: boolean }[];
  pending: { tiId: string; reason: string | null }[];
}

function executor(
  over: Partial<KubernetesExecutorOptions> = {},
  active: { attempt: Attempt; running: boolean }[] = [],
): { ex: KubernetesExecutor; rec: Recorded } {
  const rec: Recorded = { finished: [], lost: [], pending: [] };
  const ex = createKubernetesExecutor({
    kubeConfig: loadKubeConfig({ kind: 'file', path: kube.kubeconfigPath }),
    pods: podSettings(NS, {
      serverUrl: 'http://cp:7070',
      killGraceMs: 1000,
      podPendingTimeoutMs: 60_000,
      keepFailedMs: 60_000,
    }),
    reporter: endsReporter((a, result) => void rec.finished.push({ tiId: a.tiId, result })),
    store: {
      lost: async (a, error, free) => {
        if (rec.lost.some((l) => l.tiId === a.tiId && l.tryNumber === a.tryNumber)) return false;
        rec.lost.push({ tiId: a.tiId, tryNumber: a.tryNumber, error, free });
        return true;
      },
      pending: async (a, reason) => void rec.pending.push({ tiId: a.tiId, reason }),
      active: async () => active,
      podGone: async () => {},
      lastLines: async (a) => taskLines.get(a.tiId) ?? [],
      // The agent of a running pod connects and starts its attempt; one the store ended is `over`.
      standings: async (attempts) =>
        new Map(
          attempts.map((a) => [
            a.tiId,
            rec.lost.some((l) => l.tiId === a.tiId && l.tryNumber === a.tryNumber)
              ? 'over'
              : kube.pod(NS, podName(a))?.status?.phase === 'Running'
                ? 'running'
                : 'queued',
          ]),
        ),
    },
    logger: pino({ level: process.env.KLOG ?? 'silent' }),
    sweepMs: 50,
    standingsMs: 50,
    ...over,
  });
  executors.push(ex);
  return { ex, rec };
}

function attempt(over: Partial<Attempt> = {}): Attempt {
  return testAttempt({ dagId: 'etl-a', taskId: 'load', ...over });
}

const running = runningPodStatus();

beforeEach(async () => {
  kube = await startFakeKubeApi({ namespaces: [NS], kubelet: 'manual', bookmarkIntervalMs: 100 });
});
afterEach(async () => {
  for (const e of executors.splice(0)) await e.shutdown(0);
  await kube.close();
});

describe('kubernetes executor', () => {
  it('creates one pod when two leaders (an overlap) dispatch the same attempt: the second gets AlreadyExists and follows it', async () => {
    const a = attempt();
    const one = executor();
    const two = executor();
    await Promise.all([one.ex.lead(true), two.ex.lead(true)]);
    await Promise.all([one.ex.dispatch(a), two.ex.dispatch(a)]);
    const name = podName(a);
    expect(kube.createCount(NS, name)).toBe(1);
    expect(kube.createAttempts(NS, name)).toBe(2);
    expect([...one.rec.finished, ...two.rec.finished]).toEqual([]);
    // Both follow it: the pod never starting is seen by each (the guarded write keeps one).
    expect(one.ex.holdsLive(a.tiId, a.attemptToken) && two.ex.holdsLive(a.tiId, a.attemptToken)).toBe(true);
  });

  it("shares a namespace with another install: neither its lead nor a retry touches the other's pods, whose ti ids are the same", async () => {
    const podsOf = (install: string) => ({
      install,
      namespace: NS,
      image: 'leoflow:test',
      serverUrl: 'http://cp:7070',
      agentCommand: ['leoflow'],
      killGraceMs: 1000,
      podPendingTimeoutMs: 60_000,
      keepSucceededMs: 0,
      keepFailedMs: 60_000,
    });
    // Install A runs ti 1, try 1 (ids start at 1 in every database).
    const a = executor({ pods: podsOf('install-a') });
    await a.ex.lead(true);
    const first = attempt({ tiId: '1', tryNumber: 1 });
    await a.ex.dispatch(first);
    kube.bindPod(NS, podName(first));
    kube.setPodStatus(NS, podName(first), running);
    expect(kube.pod(NS, podName(first)).metadata.labels).toMatchObject({
      'leoflow.io/install': 'install-a',
      'leoflow.io/ti-id': '1',
    });
    // Install B takes its lead with nothing live (A's pod would be a stray), then retries its own
    // ti 1 (A's pod would be an earlier try), then finished pods' retention runs over the namespace.
    const b = executor({ pods: { ...podsOf('install-b'), keepFailedMs: 0 } });
    await b.ex.lead(true);
    const retry = attempt({ tiId: '1', tryNumber: 2 });
    await b.ex.dispatch(retry);
    kube.bindPod(NS, podName(retry));
    kube.setPodStatus(NS, podName(retry), running);
    await new Promise((r) => setTimeout(r, 300)); // a few sweeps
    const deletes = kube
      .requests()
      .filter((r) => r.verb === 'delete')
      .map((r) => r.name);
    expect(deletes).toEqual([]);
    expect(kube.pod(NS, podName(first))?.metadata.deletionTimestamp).toBeUndefined();
    expect(kube.pod(NS, podName(retry)).metadata.labels).toMatchObject({
      'leoflow.io/install': 'install-b',
      'leoflow.io/ti-id': '1',
      'leoflow.io/try': '2',
    });
    expect([...a.rec.lost, ...b.rec.lost]).toEqual([]);
    // Each still follows its own: A's pod ending fails A's attempt only.
    kube.setPodStatus(NS, podName(first), {
      phase: 'Failed',
      containerStatuses: [
        {
          name: 'task',
          ready: false,
          restartCount: 0,
          image: 'leoflow:test',
          imageID: '',
          state: { terminated: { exitCode: 1, reason: 'Error' } },
        },
      ],
    });
    await waitFor('A sees its pod fail', async () => a.rec.lost.length + a.rec.finished.length > 0);
    expect([...b.rec.lost, ...b.rec.finished]).toEqual([]);
  });

  it('creates pods a namespace enforcing Pod Security restricted admits, by default', async () => {
    kube.labelNamespace(NS, { 'pod-security.kubernetes.io/enforce': 'restricted' });
    const { ex, rec } = executor();
    await ex.lead(true);
    const a = attempt();
    await ex.dispatch(a);
    expect([...rec.lost, ...rec.finished]).toEqual([]);
    expect(kube.createCount(NS, podName(a))).toBe(1);
    const pod = kube.pod(NS, podName(a));
    expect(pod.spec.securityContext).toMatchObject({ runAsNonRoot: true, seccompProfile: { type: 'RuntimeDefault' } });
    expect(pod.spec.containers[0].securityContext).toEqual({
      allowPrivilegeEscalation: false,
      capabilities: { drop: ['ALL'] },
    });
  });

  it('labels the pod for dag, run, task and try, and runs leoflow agent --once for exactly this attempt', async () => {
    const { ex } = executor();
    await ex.lead(true);
    const a = attempt({
      dagId: 'a-1',
      taskId: 'x',
      pod: { image: null, kubernetes: { resources: { requests: { cpu: '250m' } }, nodeSelector: { pool: 'etl' } } },
    });
    await ex.dispatch(a);
    const pod = kube.pod(NS, podName(a));
    expect(pod.metadata.labels).toMatchObject({
      'app.kubernetes.io/managed-by': 'leoflow',
      'leoflow.io/dag': 'a-1',
      'leoflow.io/run-id': a.runId,
      'leoflow.io/task': 'x',
      'leoflow.io/ti-id': a.tiId,
      'leoflow.io/try': '1',
    });
    expect(pod.spec.restartPolicy).toBe('Never');
    expect(pod.spec.nodeSelector).toEqual({ pool: 'etl' });
    const c = pod.spec.containers[0];
    expect(c.command).toEqual([
      'leoflow',
      'agent',
      '--once',
      '--ti',
      a.tiId,
      '--server',
      'http://cp:7070',
      '--id',
      podName(a),
      '--on-shutdown',
      'handback',
      '--state-dir',
      `/tmp/leoflow/${podName(a)}`,
      '--log-format',
      'json',
    ]);
    expect(c.env).toEqual([{ name: 'LEOFLOW_ATTEMPT_TOKEN', value: a.attemptToken }]);
    expect(c.resources.requests).toEqual({ cpu: '250m' });
    // DAG a + task 1-x names another pod than DAG a-1 + task x.
    expect(podName({ ...a, dagId: 'a', taskId: '1-x' })).not.toBe(podName(a));
  });

  it('fails an attempt at once when its container cannot start, deletes its pod, and stops holding it', async () => {
    const { ex, rec } = executor();
    await ex.lead(true);
    const a = attempt();
    await ex.dispatch(a);
    expect(ex.holdsLive(a.tiId, a.attemptToken)).toBe(true);
    kube.setPodStatus(NS, podName(a), {
      phase: 'Pending',
      containerStatuses: [
        taskContainer({ waiting: { reason: 'CreateContainerConfigError', message: 'secret "db" not found' } }),
      ],
    });
    await waitFor('the end reported', async () => rec.finished.length > 0);
    expect(rec.finished[0]!.result).toMatchObject({
      outcome: 'spawn_failed',
      error: 'POD_CANNOT_START:CreateContainerConfigError:secret "db" not found',
    });
    await waitFor('the pod deleted', async () => kube.pod(NS, podName(a)) === undefined);
    expect(ex.holdsLive(a.tiId, a.attemptToken)).toBe(false);
  });

  it('ends the attempt as lost when its node is lost, and deletes the pod', async () => {
    const { ex, rec } = executor();
    await ex.lead(true);
    const a = attempt();
    await ex.dispatch(a);
    kube.bindPod(NS, podName(a));
    kube.setPodStatus(NS, podName(a), running);
    await waitFor('running seen', async () => !ex.holdsLive(a.tiId, a.attemptToken));
    kube.loseNode(NS, podName(a));
    await waitFor('lost', async () => rec.lost.length > 0);
    expect(rec.lost[0]!.error).toMatch(/^POD_LOST:NodeLost/);
    await waitFor('a delete sent', async () =>
      kube.requests().some((r) => r.verb === 'delete' && r.name === podName(a)),
    );
  });

  it('ends the attempt as lost at once when its node is lost as Kubernetes 1.27+ reports it (Ready=False, phase Running)', async () => {
    const { ex, rec } = executor();
    await ex.lead(true);
    const a = attempt();
    await ex.dispatch(a);
    kube.bindPod(NS, podName(a));
    kube.setPodStatus(NS, podName(a), {
      ...running,
      conditions: [...running.conditions, { type: 'Ready', status: 'True' }],
    });
    await waitFor('running seen', async () => !ex.holdsLive(a.tiId, a.attemptToken));
    kube.loseNodeAsCurrent(NS, podName(a), { notReadyAfterMs: 0, evictAfterMs: 60_000 });
    // Long before the taint manager's eviction: the node controller's mark is enough.
    await waitFor('lost', async () => rec.lost.length > 0, 3000);
    expect(rec.lost[0]!.error).toMatch(/^POD_LOST:NodeNotReady/);
    expect(rec.lost[0]!.free, 'a lost node spends no try').toBe(true);
    // Deleted with its grace period, never forced: it may still run on the partitioned node, so it
    // stays (Terminating) until a kubelet, the Node's deletion or an operator removes it.
    await waitFor(
      'deleted gracefully',
      async () => kube.pod(NS, podName(a))?.metadata?.deletionTimestamp !== undefined,
    );
    expect(kube.pod(NS, podName(a))?.status?.phase).toBe('Running');
  });

  it("reads the taint manager's eviction (DisruptionTarget) of a pod stuck Terminating as a loss", async () => {
    const { ex, rec } = executor();
    await ex.lead(true);
    const a = attempt();
    await ex.dispatch(a);
    kube.bindPod(NS, podName(a));
    kube.setPodStatus(NS, podName(a), {
      ...running,
      conditions: [
        ...running.conditions,
        {
          type: 'DisruptionTarget',
          status: 'True',
          reason: 'DeletionByTaintManager',
          message: 'Taint manager: deleting due to NoExecute taint',
        },
      ],
    });
    await waitFor('lost', async () => rec.lost.length > 0, 3000);
    expect(rec.lost[0]!.error).toBe('POD_LOST:DeletionByTaintManager:Taint manager: deleting due to NoExecute taint');
    expect(rec.lost[0]!.free).toBe(true);
  });

  it('keeps watching through a compaction (410 Gone: it lists again) and still sees a pod deleted meanwhile', async () => {
    const { ex, rec } = executor();
    await ex.lead(true);
    const a = attempt();
    await ex.dispatch(a);
    const listsBefore = kube.requests().filter((r) => r.verb === 'list').length;
    kube.compact({ expireWatches: true });
    kube.deleteFromOutside(NS, podName(a));
    await waitFor('lost', async () => rec.lost.length > 0);
    expect(rec.lost[0]!.error).toMatch(/^POD_DELETED: pod lf-etl-a-load-[0-9a-f]{12} in namespace jobs was deleted/);
    expect(rec.lost[0]!.free, 'a pod deleted from outside is no disruption Kubernetes names').toBe(false);
    await waitFor('a list again', async () => kube.requests().filter((r) => r.verb === 'list').length > listsBefore);
  });

  it("deletes the pod of an earlier try and sees it gone before creating the next try's", async () => {
    const { ex } = executor();
    await ex.lead(true);
    const first = attempt();
    await ex.dispatch(first);
    const second = { ...first, tryNumber: 2, attemptToken: randomUUID() };
    await ex.dispatch(second);
    // The dispatch returns at once; the retry's pod is created once the earlier one is seen gone.
    await waitFor('the retry created', async () => kube.createCount(NS, podName(second)) === 1);
    const log = kube.requests();
    const del = log.findIndex((r) => r.verb === 'delete' && r.name === podName(first));
    const lastCreate = log.map((r) => r.verb).lastIndexOf('create');
    expect(del).toBeGreaterThanOrEqual(0);
    expect(del, 'the earlier pod is deleted before the next is created').toBeLessThan(lastCreate);
    expect(kube.pod(NS, podName(first))).toBeUndefined();
    expect(kube.pod(NS, podName(second))).toBeDefined();
  });

  it("sees an earlier try's pod it has just created though the watch has not told of it yet (a lagging watch cache)", async () => {
    await kube.close();
    kube = await startFakeKubeApi({ namespaces: [NS], kubelet: 'manual', bookmarkIntervalMs: 100, watchLagMs: 500 });
    const { ex } = executor();
    await ex.lead(true);
    const first = attempt();
    await ex.dispatch(first);
    // At once, before the watch tells of the first pod: the retry must not run beside it.
    const second = { ...first, tryNumber: 2, attemptToken: randomUUID() };
    await ex.dispatch(second);
    await waitFor('the retry created', async () => kube.createCount(NS, podName(second)) === 1, 5_000);
    const log = kube.requests();
    const del = log.findIndex((r) => r.verb === 'delete' && r.name === podName(first));
    const create = log.map((r) => r.verb).lastIndexOf('create');
    expect(del, 'the earlier pod is deleted').toBeGreaterThanOrEqual(0);
    expect(del, 'before the retry is created').toBeLessThan(create);
    expect(kube.pod(NS, podName(first))).toBeUndefined();
  });

  it('on taking the lead adopts the pods of live attempts, deletes those of attempts that are over, creates missing ones of queued attempts', async () => {
    const first = executor();
    await first.ex.lead(true);
    const live = attempt();
    const over = attempt();
    await first.ex.dispatch(live);
    await first.ex.dispatch(over);
    kube.setPodStatus(NS, podName(live), running);
    await first.ex.lead(false);
    const queued = attempt();
    const goneRunning = attempt();
    const next = executor({}, [
      { attempt: live, running: true },
      { attempt: queued, running: false },
      { attempt: goneRunning, running: true },
    ]);
    await next.ex.lead(true);
    await waitFor('the over one deleted', async () => kube.pod(NS, podName(over)) === undefined);
    await waitFor('the queued one created', async () => kube.createCount(NS, podName(queued)) === 1);
    expect(kube.createCount(NS, podName(live))).toBe(1);
    expect(next.rec.lost).toEqual([
      expect.objectContaining({ tiId: goneRunning.tiId, error: expect.stringMatching(/^POD_GONE: no pod/) }),
    ]);
    // The adopted pod is followed: its deletion ends its attempt.
    kube.deleteFromOutside(NS, podName(live));
    await waitFor('adopted pod lost', async () => next.rec.lost.some((l) => l.tiId === live.tiId));
  });

  it('never takes a pod left by an earlier database (same ids, another token) for a new attempt: its own pod is created, the old one deleted', async () => {
    // Ids start again after a database is reset: the old pod has this attempt's dag, run, task,
    // ti and try, and runs on with a token the new database never issued.
    const fresh = attempt();
    const old = { ...fresh, attemptToken: randomUUID() };
    const before = executor();
    await before.ex.lead(true);
    await before.ex.dispatch(old);
    kube.setPodStatus(NS, podName(old), running);
    await before.ex.lead(false);
    const after = executor({}, [{ attempt: fresh, running: false }]);
    await after.ex.lead(true);
    await waitFor("the new attempt's own pod created", async () => kube.createCount(NS, podName(fresh)) === 1);
    await waitFor('the old pod deleted', async () => kube.pod(NS, podName(old)) === undefined);
    expect(podName(fresh)).not.toBe(podName(old));
    expect(after.rec.lost).toEqual([]);
  });

  it('removes finished pods per the retention: succeeded at once, failed after keep_failed', async () => {
    const { ex } = executor({
      pods: podSettings(NS, {
        image: 'x',
        serverUrl: 'http://cp:7070',
        killGraceMs: 1000,
        podPendingTimeoutMs: 60_000,
        keepFailedMs: 600,
      }),
    });
    await ex.lead(true);
    const ok = attempt();
    const bad = attempt();
    await ex.dispatch(ok);
    await ex.dispatch(bad);
    kube.setPodStatus(NS, podName(ok), { phase: 'Succeeded' });
    kube.setPodStatus(NS, podName(bad), { phase: 'Failed', reason: 'Error' });
    await waitFor('succeeded removed', async () => kube.pod(NS, podName(ok)) === undefined, 2_000);
    expect(kube.pod(NS, podName(bad))).toBeDefined();
    await waitFor('failed removed after its keep', async () => kube.pod(NS, podName(bad)) === undefined, 5_000);
  });
});

describe('kubernetes executor: credentials and refusals', () => {
  it('talks to the API over TLS with the in-cluster service account (token, CA, $KUBERNETES_SERVICE_HOST)', async () => {
    await kube.close();
    kube = await startFakeKubeApi({ namespaces: [NS], kubelet: 'manual', tls: true });
    const mount = await kube.serviceAccountMount({ namespace: NS });
    const saved = { ...process.env };
    Object.assign(process.env, mount.env);
    let kubeConfig;
    try {
      kubeConfig = loadKubeConfig({ kind: 'in-cluster' }, mount.pathPrefix);
    } finally {
      for (const k of Object.keys(mount.env)) if (saved[k] === undefined) delete process.env[k];
    }
    const { ex, rec } = executor({ kubeConfig });
    await ex.lead(true);
    const a = attempt();
    await ex.dispatch(a);
    expect(rec.finished).toEqual([]);
    expect(kube.createCount(NS, podName(a))).toBe(1);
  });

  it("fails the attempt with the API server's reason on an RBAC denial and on a quota, with one create each", async () => {
    kube.grantToken('reader', [{ verbs: ['get', 'list', 'watch'], resources: ['pods'], namespaces: [NS] }]);
    const { ex, rec } = executor({
      kubeConfig: loadKubeConfig({ kind: 'file', path: await kube.kubeconfigFor('reader') }),
    });
    await ex.lead(true);
    const a = attempt();
    await ex.dispatch(a);
    expect(rec.finished[0]!.result.error).toMatch(
      /^POD_CREATE_REFUSED:403 Forbidden: pods is forbidden: User "[^"]+" cannot create resource "pods"/,
    );
    expect(kube.createAttempts(NS, podName(a))).toBeLessThanOrEqual(1);

    kube.setQuota(NS, { name: 'small', hard: { pods: '0' } });
    const quota = executor();
    await quota.ex.lead(true);
    const b = attempt();
    await quota.ex.dispatch(b);
    expect(quota.rec.finished[0]!.result.error).toMatch(
      /^POD_CREATE_REFUSED:403 QuotaExceeded: .*exceeded quota: small/,
    );
    expect(kube.createAttempts(NS, podName(b))).toBe(1);
  });

  it('fails the attempt on an invalid pod (422) with the field the API server names', async () => {
    const { ex, rec } = executor();
    await ex.lead(true);
    const a = attempt({
      pod: { image: null, kubernetes: { resources: { limits: { cpu: '1' }, requests: { cpu: '2' } } } },
    });
    await ex.dispatch(a);
    expect(rec.finished[0]!.result.error).toMatch(/^POD_CREATE_REFUSED:422 Invalid: /);
  });
});

describe('kubernetes executor: pending', () => {
  it('fails a pod scheduled but never running past the pending timeout, with its last reason', async () => {
    const { ex, rec } = executor({
      pods: podSettings(NS, {
        image: 'x',
        serverUrl: 'http://cp:7070',
        killGraceMs: 1000,
        podPendingTimeoutMs: 400,
        keepFailedMs: 60_000,
      }),
    });
    await ex.lead(true);
    const a = attempt();
    await ex.dispatch(a);
    kube.bindPod(NS, podName(a));
    kube.setPodStatus(NS, podName(a), {
      phase: 'Pending',
      conditions: [{ type: 'PodScheduled', status: 'True' }],
      containerStatuses: [taskContainer({ waiting: { reason: 'ContainerCreating' } })],
    });
    await waitFor('failed', async () => rec.finished.length > 0, 5_000);
    expect(rec.finished[0]!.result.error).toBe('POD_PENDING_TIMEOUT:ContainerCreating (pending longer than 0s)');
    expect(rec.pending.map((p) => p.reason)).toContain('POD_PENDING:ContainerCreating');
  });
});

describe('kubernetes executor: a hung create', () => {
  it('sends a create again when the first gets no answer in time; the pod is created once', async () => {
    const { ex, rec } = executor({ requestTimeoutMs: 300 });
    await ex.lead(true);
    kube.setLatency(1_000, 'create');
    const a = attempt();
    const dispatched = ex.dispatch(a);
    await new Promise((r) => setTimeout(r, 350));
    kube.setLatency(0, 'create');
    await dispatched;
    expect(rec.finished).toEqual([]);
    expect(kube.createCount(NS, podName(a))).toBe(1);
    await waitFor('both creates arrived', async () => kube.createAttempts(NS, podName(a)) === 2, 3_000);
  });
});

describe('kubernetes executor: adoption during a leader overlap', () => {
  it('does not delete the pod of an attempt claimed after its first read (by the leader before it): it reads again and follows it', async () => {
    const old = executor();
    await old.ex.lead(true);
    const late = attempt();
    await old.ex.dispatch(late);
    await old.ex.lead(false);
    let reads = 0;
    // First read: the attempt is not claimed yet; the second sees it.
    const rec: Recorded = { finished: [], lost: [], pending: [] };
    const ex = createKubernetesExecutor({
      kubeConfig: loadKubeConfig({ kind: 'file', path: kube.kubeconfigPath }),
      pods: podSettings(NS, {
        image: 'x',
        serverUrl: 'http://cp:7070',
        killGraceMs: 1000,
        podPendingTimeoutMs: 60_000,
        keepFailedMs: 60_000,
      }),
      reporter: {
        started: async () => true,
        log: () => {},
        heartbeat: async () => new Set(),
        logsSoFar: async () => ({ stdout: 0, stderr: 0 }),
        finished: async (a, result) => void rec.finished.push({ tiId: a.tiId, result }),
      },
      store: {
        lost: async (a, error, free) => {
          rec.lost.push({ tiId: a.tiId, tryNumber: a.tryNumber, error, free });
          return true;
        },
        pending: async () => {},
        active: async () => (reads++ === 0 ? [] : [{ attempt: late, running: false }]),
        podGone: async () => {},
        lastLines: async () => [],
        standings: async () => new Map(),
      },
      logger: pino({ level: 'silent' }),
    });
    executors.push(ex);
    await ex.lead(true);
    expect(reads).toBe(2);
    expect(kube.pod(NS, podName(late))).toBeDefined();
    kube.deleteFromOutside(NS, podName(late));
    await waitFor('followed: its deletion ends the attempt', async () => rec.lost.some((l) => l.tiId === late.tiId));
  });
});

describe('kubernetes executor: why a pod waits, and what a failed pod said', () => {
  it('makes the latest Warning event the pending reason when the status says only ContainerCreating, listing events rate-limited', async () => {
    const { ex, rec } = executor({ pendingEventsMs: 200 });
    await ex.lead(true);
    const a = attempt();
    await ex.dispatch(a);
    const name = podName(a);
    kube.bindPod(NS, name);
    kube.setPodStatus(NS, name, {
      phase: 'Pending',
      conditions: [{ type: 'PodScheduled', status: 'True' }],
      containerStatuses: [taskContainer({ waiting: { reason: 'ContainerCreating' } })],
    });
    kube.addPodEvent(NS, name, {
      type: 'Normal',
      reason: 'Scheduled',
      message: `Successfully assigned ${NS}/${name} to node-1`,
      component: 'default-scheduler',
    });
    kube.addPodEvent(NS, name, {
      reason: 'FailedMount',
      message: 'MountVolume.SetUp failed for volume "data" : configmap "etl-config" not found',
    });
    const want =
      'POD_PENDING:FailedMount:MountVolume.SetUp failed for volume "data" : configmap "etl-config" not found';
    await waitFor('the event as the pending reason', async () => rec.pending.some((p) => p.reason === want), 5_000);
    expect(rec.pending.map((p) => p.reason)).toEqual(['POD_PENDING:ContainerCreating', want]);
    // A later watch event with the same bare status keeps the event's reason.
    kube.setPodStatus(NS, name, {
      phase: 'Pending',
      conditions: [{ type: 'PodScheduled', status: 'True' }],
      containerStatuses: [taskContainer({ waiting: { reason: 'ContainerCreating' } })],
      message: 'still',
    });
    await new Promise((r) => setTimeout(r, 700));
    expect(rec.pending.at(-1)!.reason).toBe(want);
    // Rate-limited per pod: about one list per 200 ms, not one per sweep (50 ms).
    const lists = kube.requests().filter((r) => r.verb === 'list' && r.path.includes('/events'));
    expect(lists.length).toBeGreaterThan(0);
    expect(lists.length).toBeLessThanOrEqual(8);
  });

  it('has one events list of a pod in flight at a time when the API server is slow', async () => {
    const { ex, rec } = executor({ pendingEventsMs: 50 });
    await ex.lead(true);
    const a = attempt();
    await ex.dispatch(a);
    kube.bindPod(NS, podName(a));
    kube.addPodEvent(NS, podName(a), {
      reason: 'FailedCreatePodSandBox',
      message: 'failed to create pod sandbox: network not ready',
    });
    kube.setLatency(600, 'list');
    await waitFor(
      'the event as the pending reason',
      async () =>
        rec.pending.some(
          (p) => p.reason === 'POD_PENDING:FailedCreatePodSandBox:failed to create pod sandbox: network not ready',
        ),
      5_000,
    );
    await new Promise((r) => setTimeout(r, 600));
    const lists = kube.requests().filter((r) => r.path.includes('/events'));
    // About 1.2 s of 600 ms lists, one after the other (not one per 50 ms sweep).
    expect(lists.length).toBeGreaterThan(0);
    expect(lists.length).toBeLessThanOrEqual(4);
  });

  it('lists no events for a pod whose status says why it waits', async () => {
    const { ex, rec } = executor({ pendingEventsMs: 100 });
    await ex.lead(true);
    const a = attempt();
    await ex.dispatch(a);
    kube.setPodStatus(NS, podName(a), {
      phase: 'Pending',
      conditions: [
        {
          type: 'PodScheduled',
          status: 'False',
          reason: 'Unschedulable',
          message: '0/3 nodes are available: 3 Insufficient cpu.',
        },
      ],
    });
    kube.addPodEvent(NS, podName(a), {
      reason: 'FailedScheduling',
      message: '0/3 nodes are available: 3 Insufficient cpu.',
      component: 'default-scheduler',
    });
    await waitFor('pending reason', async () => rec.pending.length > 0);
    await new Promise((r) => setTimeout(r, 500));
    expect(rec.pending.map((p) => p.reason)).toEqual([
      'POD_PENDING:Unschedulable:0/3 nodes are available: 3 Insufficient cpu.',
    ]);
    expect(kube.requests().filter((r) => r.path.includes('/events'))).toEqual([]);
  });

  it("puts the last lines of a pod that failed before its agent reported (leoflow not in the image: exit 127) in the attempt's error", async () => {
    await kube.close();
    kube = await startFakeKubeApi({ namespaces: [NS] });
    const noisy = Array.from({ length: 30 }, (_, i) => `line ${i}`).join('\n');
    const { ex, rec } = executor({
      pods: {
        install: 'install-a',
        namespace: NS,
        image: 'leoflow:test',
        serverUrl: 'http://cp:7070',
        agentCommand: ['sh', '-c', `echo '${noisy}'; echo 'sh: 1: leoflow: not found' >&2; exit 127`, 'sh'],
        killGraceMs: 1000,
        podPendingTimeoutMs: 60_000,
        keepSucceededMs: 0,
        keepFailedMs: 60_000,
      },
    });
    await ex.lead(true);
    const a = attempt();
    await ex.dispatch(a);
    await waitFor('the attempt lost', async () => rec.lost.length > 0, 10_000);
    const error = rec.lost[0]!.error;
    expect(error).toMatch(/^POD_FAILED:Error:exit code 127; last lines: /);
    expect(error).toContain('sh: 1: leoflow: not found');
    // The tail only: the first lines are not there, the last ones are.
    expect(error).toContain('line 29');
    expect(error).not.toContain('line 5 ');
    expect(error).not.toContain('line 0 ');
    expect(error.length).toBeLessThan(2200);
    expect(kube.requests().filter((r) => r.path.includes(`/pods/${podName(a)}/log`)).length).toBe(1);
  });

  it("quotes the task's own last lines in a failed pod's error, never the agent's JSON log", async () => {
    await kube.close();
    kube = await startFakeKubeApi({ namespaces: [NS] });
    // The agent's pino records, as `leoflow agent --once` writes them, then the pod killed.
    const record = (msg: string, extra = '') =>
      JSON.stringify(JSON.parse(`{"level":30,"time":1764300000000,"pid":7,"agentId":"pod-x",${extra}"msg":"${msg}"}`));
    const agentLog = [
      record('connected to the control plane', '"server":"http://cp:7070",'),
      record('attempt started', '"tiId":"1","try":1,"token":"0123456789abcdef",'),
      record('could not send a batch of log lines', '"err":{"message":"stream reset"},'),
    ].join('\n');
    const { ex, rec } = executor({
      pods: {
        install: 'install-a',
        namespace: NS,
        image: 'leoflow:test',
        serverUrl: 'http://cp:7070',
        agentCommand: ['sh', '-c', `printf '%s\\n' '${agentLog}'; exit 137`, 'sh'],
        killGraceMs: 1000,
        podPendingTimeoutMs: 60_000,
        keepSucceededMs: 0,
        keepFailedMs: 60_000,
      },
    });
    await ex.lead(true);
    const withLines = attempt();
    taskLines.set(withLines.tiId, ['loading 1.2 GB of rows', 'building the index']);
    await ex.dispatch(withLines);
    await waitFor('the attempt lost', async () => rec.lost.some((l) => l.tiId === withLines.tiId), 10_000);
    expect(rec.lost.find((l) => l.tiId === withLines.tiId)!.error).toBe(
      'POD_FAILED:Error:exit code 137; last lines: loading 1.2 GB of rows | building the index',
    );
    // A task that said nothing (it never ran): the pod's log, each agent record cut to its message.
    const silent = attempt();
    await ex.dispatch(silent);
    await waitFor('the attempt lost', async () => rec.lost.some((l) => l.tiId === silent.tiId), 10_000);
    expect(rec.lost.find((l) => l.tiId === silent.tiId)!.error).toBe(
      'POD_FAILED:Error:exit code 137; last lines: connected to the control plane | attempt started | could not send a batch of log lines: stream reset',
    );
  });
});

describe('kubernetes executor: pods end with their attempts', () => {
  it('deletes the pod of an attempt the store has ended (the heartbeat reaper, a run cancelled), with its grace period', async () => {
    const ended = new Set<string>();
    const { ex } = executor({
      store: {
        lost: async () => true,
        pending: async () => {},
        active: async () => [],
        podGone: async () => {},
        lastLines: async () => [],
        standings: async (attempts) =>
          new Map(attempts.map((a) => [a.tiId, ended.has(a.attemptToken) ? 'over' : 'running'])),
      },
    });
    await ex.lead(true);
    const a = attempt();
    const b = attempt();
    await ex.dispatch(a);
    await ex.dispatch(b);
    for (const x of [a, b]) {
      kube.bindPod(NS, podName(x));
      kube.setPodStatus(NS, podName(x), running);
    }
    await waitFor('running seen', async () => !ex.holdsLive(a.tiId, a.attemptToken));
    ended.add(a.attemptToken);
    await waitFor('a delete of its pod sent', async () =>
      kube.requests().some((r) => r.verb === 'delete' && r.name === podName(a)),
    );
    expect(kube.pod(NS, podName(a))?.metadata.deletionGracePeriodSeconds).toBe(6);
    expect(kube.requests().some((r) => r.verb === 'delete' && r.name === podName(b))).toBe(false);
  });

  it('ends the attempt when its task container ends though an injected sidecar keeps the pod Running, and deletes the pod', async () => {
    const { ex, rec } = executor();
    await ex.lead(true);
    const a = attempt();
    await ex.dispatch(a);
    kube.bindPod(NS, podName(a));
    const proxy = { ...running.containerStatuses[0]!, name: 'istio-proxy', image: 'proxy' };
    kube.setPodStatus(NS, podName(a), { ...running, containerStatuses: [...running.containerStatuses, proxy] });
    await waitFor('running seen', async () => !ex.holdsLive(a.tiId, a.attemptToken));
    // The agent died without its report (exit 1); the proxy runs on, so the kubelet keeps the pod Running.
    kube.setPodStatus(NS, podName(a), {
      ...running,
      containerStatuses: [
        {
          ...running.containerStatuses[0]!,
          ready: false,
          state: { terminated: { exitCode: 1, reason: 'Error', startedAt: new Date().toISOString() } },
        },
        proxy,
      ],
    });
    await waitFor('lost', async () => rec.lost.length > 0, 3000);
    expect(rec.lost[0]!.error).toMatch(/^POD_FAILED:Error:exit code 1/);
    await waitFor('its pod deleted', async () =>
      kube.requests().some((r) => r.verb === 'delete' && r.name === podName(a)),
    );
  });
});
