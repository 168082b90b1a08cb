/**
 * The kubernetes executor on its own, through the real client-node, against the fake API server
 * with its kubelet in manual mode: the test moves each pod, and checks what the executor writes
 * (through a recording store) and sends to the API server.
 */
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { podName } from '../../src/core/pod-identity.js';
import { podSettings, runningPodStatus, taskContainer } from '../helpers/fake-kube/test-executor.js';
import { startFakeKubeApi } from '../helpers/fake-kube/index.js';
import { NS, attempt, useRecordingExecutors } from '../helpers/fake-kube/recording-executors.js';
import { bindWithStatus, dispatchedAttempt, nextTry } from '../helpers/fake-kube/dispatched-attempt.js';
import { waitFor } from '../helpers/leoflow-process.js';

const k = useRecordingExecutors();
const { executor } = k;
const running = runningPodStatus();

describe('kubernetes executor', () => {
  it('creates one pod when two leaders (an overlap) dispatch the same attempt: the second gets AlreadyExists and follows it', async () => {
    const a = attempt();
    const one = executor();
    const two = executor();
    await Promise.all([one.ex.lead(true), two.ex.lead(true)]);
    await Promise.all([one.ex.dispatch(a), two.ex.dispatch(a)]);
    const name = podName(a);
    expect(k.kube.createCount(NS, name)).toBe(1);
    expect(k.kube.createAttempts(NS, name)).toBe(2);
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
    bindWithStatus(k, first, running);
    expect(k.kube.pod(NS, podName(first)).metadata.labels).toMatchObject({
      'leoflow.io/install': 'install-a',
      'leoflow.io/ti-id': '1',
    });
    // Install B takes its lead with nothing live (A's pod would be a stray), then retries its own
    // ti 1 (A's pod would be an earlier try), then finished pods' retention runs over the namespace.
    const b = executor({ pods: { ...podsOf('install-b'), keepFailedMs: 0 } });
    await b.ex.lead(true);
    const retry = attempt({ tiId: '1', tryNumber: 2 });
    await b.ex.dispatch(retry);
    bindWithStatus(k, retry, running);
    await new Promise((r) => setTimeout(r, 300)); // a few sweeps
    const deletes = k.kube
      .requests()
      .filter((r) => r.verb === 'delete')
      .map((r) => r.name);
    expect(deletes).toEqual([]);
    expect(k.kube.pod(NS, podName(first))?.metadata.deletionTimestamp).toBeUndefined();
    expect(k.kube.pod(NS, podName(retry)).metadata.labels).toMatchObject({
      'leoflow.io/install': 'install-b',
      'leoflow.io/ti-id': '1',
      'leoflow.io/try': '2',
    });
    expect([...a.rec.lost, ...b.rec.lost]).toEqual([]);
    // Each still follows its own: A's pod ending fails A's attempt only.
    k.kube.setPodStatus(NS, podName(first), {
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
    k.kube.labelNamespace(NS, { 'pod-security.kubernetes.io/enforce': 'restricted' });
    const { ex, rec, a } = await dispatchedAttempt(k);
    expect([...rec.lost, ...rec.finished]).toEqual([]);
    expect(k.kube.createCount(NS, podName(a))).toBe(1);
    const pod = k.kube.pod(NS, podName(a));
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
    const pod = k.kube.pod(NS, podName(a));
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
    const { ex, rec, a } = await dispatchedAttempt(k);
    expect(ex.holdsLive(a.tiId, a.attemptToken)).toBe(true);
    k.kube.setPodStatus(NS, podName(a), {
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
    await waitFor('the pod deleted', async () => k.kube.pod(NS, podName(a)) === undefined);
    expect(ex.holdsLive(a.tiId, a.attemptToken)).toBe(false);
  });

  it('ends the attempt as lost when its node is lost, and deletes the pod', async () => {
    const { ex, rec, a } = await dispatchedAttempt(k);
    bindWithStatus(k, a, running);
    await waitFor('running seen', async () => !ex.holdsLive(a.tiId, a.attemptToken));
    k.kube.loseNode(NS, podName(a));
    await waitFor('lost', async () => rec.lost.length > 0);
    expect(rec.lost[0]!.error).toMatch(/^POD_LOST:NodeLost/);
    await waitFor('a delete sent', async () =>
      k.kube.requests().some((r) => r.verb === 'delete' && r.name === podName(a)),
    );
  });

  it('ends the attempt as lost at once when its node is lost as Kubernetes 1.27+ reports it (Ready=False, phase Running)', async () => {
    const { ex, rec, a } = await dispatchedAttempt(k);
    bindWithStatus(k, a, {
      ...running,
      conditions: [...running.conditions, { type: 'Ready', status: 'True' }],
    });
    await waitFor('running seen', async () => !ex.holdsLive(a.tiId, a.attemptToken));
    k.kube.loseNodeAsCurrent(NS, podName(a), { notReadyAfterMs: 0, evictAfterMs: 60_000 });
    // Long before the taint manager's eviction: the node controller's mark is enough.
    await waitFor('lost', async () => rec.lost.length > 0, 3000);
    expect(rec.lost[0]!.error).toMatch(/^POD_LOST:NodeNotReady/);
    expect(rec.lost[0]!.free, 'a lost node spends no try').toBe(true);
    // Deleted with its grace period, never forced: it may still run on the partitioned node, so it
    // stays (Terminating) until a kubelet, the Node's deletion or an operator removes it.
    await waitFor(
      'deleted gracefully',
      async () => k.kube.pod(NS, podName(a))?.metadata?.deletionTimestamp !== undefined,
    );
    expect(k.kube.pod(NS, podName(a))?.status?.phase).toBe('Running');
  });

  it("reads the taint manager's eviction (DisruptionTarget) of a pod stuck Terminating as a loss", async () => {
    const { ex, rec, a } = await dispatchedAttempt(k);
    bindWithStatus(k, a, {
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
    const { ex, rec, a } = await dispatchedAttempt(k);
    const listsBefore = k.kube.requests().filter((r) => r.verb === 'list').length;
    k.kube.compact({ expireWatches: true });
    k.kube.deleteFromOutside(NS, podName(a));
    await waitFor('lost', async () => rec.lost.length > 0);
    expect(rec.lost[0]!.error).toMatch(/^POD_DELETED: pod lf-etl-a-load-[0-9a-f]{12} in namespace jobs was deleted/);
    expect(rec.lost[0]!.free, 'a pod deleted from outside is no disruption Kubernetes names').toBe(false);
    await waitFor('a list again', async () => k.kube.requests().filter((r) => r.verb === 'list').length > listsBefore);
  });

  it("deletes the pod of an earlier try and sees it gone before creating the next try's", async () => {
    const { ex, a: first } = await dispatchedAttempt(k);
    const second = nextTry(first);
    await ex.dispatch(second);
    // The dispatch returns at once; the retry's pod is created once the earlier one is seen gone.
    await waitFor('the retry created', async () => k.kube.createCount(NS, podName(second)) === 1);
    const log = k.kube.requests();
    const del = log.findIndex((r) => r.verb === 'delete' && r.name === podName(first));
    const lastCreate = log.map((r) => r.verb).lastIndexOf('create');
    expect(del).toBeGreaterThanOrEqual(0);
    expect(del, 'the earlier pod is deleted before the next is created').toBeLessThan(lastCreate);
    expect(k.kube.pod(NS, podName(first))).toBeUndefined();
    expect(k.kube.pod(NS, podName(second))).toBeDefined();
  });

  it("sees an earlier try's pod it has just created though the watch has not told of it yet (a lagging watch cache)", async () => {
    await k.kube.close();
    k.kube = await startFakeKubeApi({ namespaces: [NS], kubelet: 'manual', bookmarkIntervalMs: 100, watchLagMs: 500 });
    const { ex, a: first } = await dispatchedAttempt(k);
    // At once, before the watch tells of the first pod: the retry must not run beside it.
    const second = nextTry(first);
    await ex.dispatch(second);
    await waitFor('the retry created', async () => k.kube.createCount(NS, podName(second)) === 1, 5_000);
    const log = k.kube.requests();
    const del = log.findIndex((r) => r.verb === 'delete' && r.name === podName(first));
    const create = log.map((r) => r.verb).lastIndexOf('create');
    expect(del, 'the earlier pod is deleted').toBeGreaterThanOrEqual(0);
    expect(del, 'before the retry is created').toBeLessThan(create);
    expect(k.kube.pod(NS, podName(first))).toBeUndefined();
  });

  it('on taking the lead adopts the pods of live attempts, deletes those of attempts that are over, creates missing ones of queued attempts', async () => {
    const first = executor();
    await first.ex.lead(true);
    const live = attempt();
    const over = attempt();
    await first.ex.dispatch(live);
    await first.ex.dispatch(over);
    k.kube.setPodStatus(NS, podName(live), running);
    await first.ex.lead(false);
    const queued = attempt();
    const goneRunning = attempt();
    const next = executor({}, [
      { attempt: live, running: true },
      { attempt: queued, running: false },
      { attempt: goneRunning, running: true },
    ]);
    await next.ex.lead(true);
    await waitFor('the over one deleted', async () => k.kube.pod(NS, podName(over)) === undefined);
    await waitFor('the queued one created', async () => k.kube.createCount(NS, podName(queued)) === 1);
    expect(k.kube.createCount(NS, podName(live))).toBe(1);
    expect(next.rec.lost).toEqual([
      expect.objectContaining({ tiId: goneRunning.tiId, error: expect.stringMatching(/^POD_GONE: no pod/) }),
    ]);
    // The adopted pod is followed: its deletion ends its attempt.
    k.kube.deleteFromOutside(NS, podName(live));
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
    k.kube.setPodStatus(NS, podName(old), running);
    await before.ex.lead(false);
    const after = executor({}, [{ attempt: fresh, running: false }]);
    await after.ex.lead(true);
    await waitFor("the new attempt's own pod created", async () => k.kube.createCount(NS, podName(fresh)) === 1);
    await waitFor('the old pod deleted', async () => k.kube.pod(NS, podName(old)) === undefined);
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
    k.kube.setPodStatus(NS, podName(ok), { phase: 'Succeeded' });
    k.kube.setPodStatus(NS, podName(bad), { phase: 'Failed', reason: 'Error' });
    await waitFor('succeeded removed', async () => k.kube.pod(NS, podName(ok)) === undefined, 2_000);
    expect(k.kube.pod(NS, podName(bad))).toBeDefined();
    await waitFor('failed removed after its keep', async () => k.kube.pod(NS, podName(bad)) === undefined, 5_000);
  });
});
