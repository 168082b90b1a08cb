/**
 * The kubernetes executor against the fake API server (kubelet in manual mode) when pods do not
 * simply run: credentials and refusals, pending, a hung create, adoption during a leader overlap,
 * why a pod waits and what a failed pod said, and pods ended with their attempts.
 */
import { describe, expect, it } from 'vitest';
import { createKubernetesExecutor } from '../../src/executors/kubernetes/kubernetes-executor.js';
import { loadKubeConfig } from '../../src/executors/kubernetes/load-kube-config.js';
import { podName } from '../../src/core/pod-identity.js';
import {
  endsReporter,
  podSettings,
  quietStore,
  runningPodStatus,
  taskContainer,
  unschedulablePodStatus,
} from '../helpers/fake-kube/test-executor.js';
import { startFakeKubeApi } from '../helpers/fake-kube/index.js';
import { NS, attempt, useRecordingExecutors, type Recorded } from '../helpers/fake-kube/recording-executors.js';
import { bindWithStatus, dispatchedAttempt } from '../helpers/fake-kube/dispatched-attempt.js';
import { waitFor } from '../helpers/leoflow-process.js';
import { pino } from 'pino';

const k = useRecordingExecutors();
const { executor, taskLines } = k;
const running = runningPodStatus();

describe('kubernetes executor: credentials and refusals', () => {
  it('talks to the API over TLS with the in-cluster service account (token, CA, $KUBERNETES_SERVICE_HOST)', async () => {
    await k.kube.close();
    k.kube = await startFakeKubeApi({ namespaces: [NS], kubelet: 'manual', tls: true });
    const mount = await k.kube.serviceAccountMount({ namespace: NS });
    const saved = { ...process.env };
    Object.assign(process.env, mount.env);
    let kubeConfig;
    try {
      kubeConfig = loadKubeConfig({ kind: 'in-cluster' }, mount.pathPrefix);
    } finally {
      for (const k of Object.keys(mount.env)) if (saved[k] === undefined) delete process.env[k];
    }
    const { ex, rec, a } = await dispatchedAttempt(k, { kubeConfig });
    expect(rec.finished).toEqual([]);
    expect(k.kube.createCount(NS, podName(a))).toBe(1);
  });

  it("fails the attempt with the API server's reason on an RBAC denial and on a quota, with one create each", async () => {
    k.kube.grantToken('reader', [{ verbs: ['get', 'list', 'watch'], resources: ['pods'], namespaces: [NS] }]);
    const { ex, rec } = executor({
      kubeConfig: loadKubeConfig({ kind: 'file', path: await k.kube.kubeconfigFor('reader') }),
    });
    await ex.lead(true);
    const a = attempt();
    await ex.dispatch(a);
    expect(rec.finished[0]!.result.error).toMatch(
      /^POD_CREATE_REFUSED:403 Forbidden: pods is forbidden: User "[^"]+" cannot create resource "pods"/,
    );
    expect(k.kube.createAttempts(NS, podName(a))).toBeLessThanOrEqual(1);

    k.kube.setQuota(NS, { name: 'small', hard: { pods: '0' } });
    const quota = executor();
    await quota.ex.lead(true);
    const b = attempt();
    await quota.ex.dispatch(b);
    expect(quota.rec.finished[0]!.result.error).toMatch(
      /^POD_CREATE_REFUSED:403 QuotaExceeded: .*exceeded quota: small/,
    );
    expect(k.kube.createAttempts(NS, podName(b))).toBe(1);
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
    const { ex, rec, a } = await dispatchedAttempt(k, {
      pods: podSettings(NS, {
        image: 'x',
        serverUrl: 'http://cp:7070',
        killGraceMs: 1000,
        podPendingTimeoutMs: 400,
        keepFailedMs: 60_000,
      }),
    });
    bindWithStatus(k, a, {
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
    k.kube.setLatency(1_000, 'create');
    const a = attempt();
    const dispatched = ex.dispatch(a);
    await new Promise((r) => setTimeout(r, 350));
    k.kube.setLatency(0, 'create');
    await dispatched;
    expect(rec.finished).toEqual([]);
    expect(k.kube.createCount(NS, podName(a))).toBe(1);
    await waitFor('both creates arrived', async () => k.kube.createAttempts(NS, podName(a)) === 2, 3_000);
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
      kubeConfig: loadKubeConfig({ kind: 'file', path: k.kube.kubeconfigPath }),
      pods: podSettings(NS, {
        image: 'x',
        serverUrl: 'http://cp:7070',
        killGraceMs: 1000,
        podPendingTimeoutMs: 60_000,
        keepFailedMs: 60_000,
      }),
      reporter: endsReporter((a, result) => void rec.finished.push({ tiId: a.tiId, result })),
      store: quietStore({
        lost: async (a, error, free) => {
          rec.lost.push({ tiId: a.tiId, tryNumber: a.tryNumber, error, free });
          return true;
        },
        active: async () => (reads++ === 0 ? [] : [{ attempt: late, running: false }]),
        standings: async () => new Map(),
      }),
      logger: pino({ level: 'silent' }),
    });
    k.track(ex);
    await ex.lead(true);
    expect(reads).toBe(2);
    expect(k.kube.pod(NS, podName(late))).toBeDefined();
    k.kube.deleteFromOutside(NS, podName(late));
    await waitFor('followed: its deletion ends the attempt', async () => rec.lost.some((l) => l.tiId === late.tiId));
  });
});

describe('kubernetes executor: why a pod waits, and what a failed pod said', () => {
  it('makes the latest Warning event the pending reason when the status says only ContainerCreating, listing events rate-limited', async () => {
    const { ex, rec, a } = await dispatchedAttempt(k, { pendingEventsMs: 200 });
    const name = podName(a);
    k.kube.bindPod(NS, name);
    k.kube.setPodStatus(NS, name, {
      phase: 'Pending',
      conditions: [{ type: 'PodScheduled', status: 'True' }],
      containerStatuses: [taskContainer({ waiting: { reason: 'ContainerCreating' } })],
    });
    k.kube.addPodEvent(NS, name, {
      type: 'Normal',
      reason: 'Scheduled',
      message: `Successfully assigned ${NS}/${name} to node-1`,
      component: 'default-scheduler',
    });
    k.kube.addPodEvent(NS, name, {
      reason: 'FailedMount',
      message: 'MountVolume.SetUp failed for volume "data" : configmap "etl-config" not found',
    });
    const want =
      'POD_PENDING:FailedMount:MountVolume.SetUp failed for volume "data" : configmap "etl-config" not found';
    await waitFor('the event as the pending reason', async () => rec.pending.some((p) => p.reason === want), 5_000);
    expect(rec.pending.map((p) => p.reason)).toEqual(['POD_PENDING:ContainerCreating', want]);
    // A later watch event with the same bare status keeps the event's reason.
    k.kube.setPodStatus(NS, name, {
      phase: 'Pending',
      conditions: [{ type: 'PodScheduled', status: 'True' }],
      containerStatuses: [taskContainer({ waiting: { reason: 'ContainerCreating' } })],
      message: 'still',
    });
    await new Promise((r) => setTimeout(r, 700));
    expect(rec.pending.at(-1)!.reason).toBe(want);
    // Rate-limited per pod: about one list per 200 ms, not one per sweep (50 ms).
    const lists = k.kube.requests().filter((r) => r.verb === 'list' && r.path.includes('/events'));
    expect(lists.length).toBeGreaterThan(0);
    expect(lists.length).toBeLessThanOrEqual(8);
  });

  it('has one events list of a pod in flight at a time when the API server is slow', async () => {
    const { ex, rec, a } = await dispatchedAttempt(k, { pendingEventsMs: 50 });
    k.kube.bindPod(NS, podName(a));
    k.kube.addPodEvent(NS, podName(a), {
      reason: 'FailedCreatePodSandBox',
      message: 'failed to create pod sandbox: network not ready',
    });
    k.kube.setLatency(600, 'list');
    await waitFor(
      'the event as the pending reason',
      async () =>
        rec.pending.some(
          (p) => p.reason === 'POD_PENDING:FailedCreatePodSandBox:failed to create pod sandbox: network not ready',
        ),
      5_000,
    );
    await new Promise((r) => setTimeout(r, 600));
    const lists = k.kube.requests().filter((r) => r.path.includes('/events'));
    // About 1.2 s of 600 ms lists, one after the other (not one per 50 ms sweep).
    expect(lists.length).toBeGreaterThan(0);
    expect(lists.length).toBeLessThanOrEqual(4);
  });

  it('lists no events for a pod whose status says why it waits', async () => {
    const { ex, rec, a } = await dispatchedAttempt(k, { pendingEventsMs: 100 });
    k.kube.setPodStatus(NS, podName(a), unschedulablePodStatus('0/3 nodes are available: 3 Insufficient cpu.'));
    k.kube.addPodEvent(NS, podName(a), {
      reason: 'FailedScheduling',
      message: '0/3 nodes are available: 3 Insufficient cpu.',
      component: 'default-scheduler',
    });
    await waitFor('pending reason', async () => rec.pending.length > 0);
    await new Promise((r) => setTimeout(r, 500));
    expect(rec.pending.map((p) => p.reason)).toEqual([
      'POD_PENDING:Unschedulable:0/3 nodes are available: 3 Insufficient cpu.',
    ]);
    expect(k.kube.requests().filter((r) => r.path.includes('/events'))).toEqual([]);
  });

  it("puts the last lines of a pod that failed before its agent reported (leoflow not in the image: exit 127) in the attempt's error", async () => {
    await k.kube.close();
    k.kube = await startFakeKubeApi({ namespaces: [NS] });
    const noisy = Array.from({ length: 30 }, (_, i) => `line ${i}`).join('\n');
    const { ex, rec, a } = await dispatchedAttempt(k, {
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
    await waitFor('the attempt lost', async () => rec.lost.length > 0, 10_000);
    const error = rec.lost[0]!.error;
    expect(error).toMatch(/^POD_FAILED:Error:exit code 127; last lines: /);
    expect(error).toContain('sh: 1: leoflow: not found');
    // The tail only: the first lines are not there, the last ones are.
    expect(error).toContain('line 29');
    expect(error).not.toContain('line 5 ');
    expect(error).not.toContain('line 0 ');
    expect(error.length).toBeLessThan(2200);
    expect(k.kube.requests().filter((r) => r.path.includes(`/pods/${podName(a)}/log`)).length).toBe(1);
  });

  it("quotes the task's own last lines in a failed pod's error, never the agent's JSON log", async () => {
    await k.kube.close();
    k.kube = await startFakeKubeApi({ namespaces: [NS] });
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
      bindWithStatus(k, x, running);
    }
    await waitFor('running seen', async () => !ex.holdsLive(a.tiId, a.attemptToken));
    ended.add(a.attemptToken);
    await waitFor('a delete of its pod sent', async () =>
      k.kube.requests().some((r) => r.verb === 'delete' && r.name === podName(a)),
    );
    expect(k.kube.pod(NS, podName(a))?.metadata.deletionGracePeriodSeconds).toBe(6);
    expect(k.kube.requests().some((r) => r.verb === 'delete' && r.name === podName(b))).toBe(false);
  });

  it('ends the attempt when its task container ends though an injected sidecar keeps the pod Running, and deletes the pod', async () => {
    const { ex, rec, a } = await dispatchedAttempt(k);
    k.kube.bindPod(NS, podName(a));
    const proxy = { ...running.containerStatuses[0]!, name: 'istio-proxy', image: 'proxy' };
    k.kube.setPodStatus(NS, podName(a), { ...running, containerStatuses: [...running.containerStatuses, proxy] });
    await waitFor('running seen', async () => !ex.holdsLive(a.tiId, a.attemptToken));
    // The agent died without its report (exit 1); the proxy runs on, so the kubelet keeps the pod Running.
    k.kube.setPodStatus(NS, podName(a), {
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
      k.kube.requests().some((r) => r.verb === 'delete' && r.name === podName(a)),
    );
  });
});
