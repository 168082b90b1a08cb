/**
 * The fake Kubernetes API's pods as real local processes, through their phases, and the pods that
 * cannot start (waiting reasons, events).
 */
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as k8s from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isAlive } from '../helpers/process-group.js';
import { startFakeKubeApi, type FakeKubeApi } from '../helpers/fake-kube/index.js';
import { pod, refusal, startFakeKubeClient, uniqueName, until } from '../helpers/fake-kube/fake-kube-client.js';

let api: FakeKubeApi;
let kc: k8s.KubeConfig;
let core: k8s.CoreV1Api;
const dirs: string[] = [];

beforeAll(async () => {
  ({ api, kc, core } = await startFakeKubeClient());
});

afterAll(async () => {
  await api.close();
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

describe('pods as processes', () => {
  it('runs the container command with its env: sh -c "exit 3" ends Failed with exit code 3 and reason Error', async () => {
    const name = uniqueName();
    await core.createNamespacedPod({
      namespace: 'default',
      body: pod(name, {
        command: ['sh', '-c', 'echo "token=$LEOFLOW_TOKEN host=$HOSTNAME"; exit 3'],
        env: [{ name: 'LEOFLOW_TOKEN', value: 't0k' }],
      }),
    });
    const p = await until(
      'Failed',
      () => api.pod('default', name)?.status?.phase === 'Failed' && api.pod('default', name),
    );
    const cs = p.status.containerStatuses[0];
    expect(cs.state.terminated).toMatchObject({ exitCode: 3, reason: 'Error' });
    expect(cs.containerID).toMatch(/^containerd:\/\//);
    expect(p.status.conditions.find((c: any) => c.type === 'Ready')).toMatchObject({
      status: 'False',
      reason: 'PodCompleted',
    });
    expect(await core.readNamespacedPodLog({ namespace: 'default', name })).toBe(`token=t0k host=${name}\n`);
    expect(await core.readNamespacedPodLog({ namespace: 'default', name, limitBytes: 9 })).toBe('token=t0k');
    expect(await core.readNamespacedPodLog({ namespace: 'default', name, tailLines: 1, limitBytes: 5 })).toBe('token');
    const reasons = (
      await core.listNamespacedEvent({ namespace: 'default', fieldSelector: `involvedObject.name=${name}` })
    ).items.map((e) => e.reason);
    expect(reasons).toEqual(expect.arrayContaining(['Scheduled', 'Pulled', 'Created', 'Started']));
  });

  it('moves Pending (ContainerCreating) → Running → Succeeded, each change a MODIFIED event in order', async () => {
    const name = uniqueName();
    const w = new k8s.Watch(kc);
    const seen: Array<{
      type: string;
      phase?: string;
      waiting?: string;
      running?: boolean;
      exitCode?: number;
      rv: number;
    }> = [];
    const created = await core.createNamespacedPod({
      namespace: 'default',
      body: pod(name, { command: ['sh', '-c', 'sleep 0.3'] }),
    });
    const ctl = await w.watch(
      `/api/v1/namespaces/default/pods`,
      { resourceVersion: created.metadata!.resourceVersion, fieldSelector: `metadata.name=${name}` },
      (type, o) => {
        const st = o.status?.containerStatuses?.[0]?.state;
        seen.push({
          type,
          phase: o.status?.phase,
          waiting: st?.waiting?.reason,
          running: st?.running !== undefined,
          exitCode: st?.terminated?.exitCode,
          rv: Number(o.metadata.resourceVersion),
        });
      },
      () => undefined,
    );
    await until('Succeeded', () => seen.some((s) => s.phase === 'Succeeded'));
    ctl.abort();
    expect(seen.every((s) => s.type === 'MODIFIED')).toBe(true);
    expect(seen.map((s) => s.rv)).toEqual([...seen.map((s) => s.rv)].sort((a, b) => a - b));
    const phases = seen.map((s) => `${s.phase}${s.waiting ? `/${s.waiting}` : ''}${s.running ? '/running' : ''}`);
    expect(phases).toContain('Pending/ContainerCreating');
    expect(phases).toContain('Running/running');
    expect(seen.at(-1)).toMatchObject({ phase: 'Succeeded', exitCode: 0 });
  });

  it('delete with a grace period: deletionTimestamp (MODIFIED), SIGTERM to the process, then DELETED', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'fake-kube-test-'));
    dirs.push(dir);
    const name = uniqueName();
    const marker = join(dir, 'term');
    await core.createNamespacedPod({
      namespace: 'default',
      body: pod(name, {
        command: ['sh', '-c', `trap 'echo term > ${marker}; exit 0' TERM; echo ready; while true; do sleep 0.05; done`],
      }),
    });
    // Running is reported when the process starts; its trap is set a moment later.
    await until('trap set', () => api.containerLogs('default', name) === 'ready\n');
    const pid = api.processes().at(-1)!;
    const types: string[] = [];
    const w = new k8s.Watch(kc);
    const ctl = await w.watch(
      '/api/v1/namespaces/default/pods',
      { resourceVersion: api.resourceVersion(), fieldSelector: `metadata.name=${name}` },
      (type, o) => types.push(`${type}${o.metadata.deletionTimestamp ? '+ts' : ''}`),
      () => undefined,
    );
    const answer = await core.deleteNamespacedPod({ namespace: 'default', name, gracePeriodSeconds: 5 });
    expect(answer.metadata?.deletionTimestamp).toBeDefined();
    expect(answer.metadata?.deletionGracePeriodSeconds).toBe(5);
    await until('DELETED', () => types.includes('DELETED+ts'));
    ctl.abort();
    expect(types[0]).toBe('MODIFIED+ts');
    expect(readFileSync(marker, 'utf8')).toBe('term\n');
    expect(isAlive(pid)).toBe(false);
    const killing = api.events('default', name).find((e) => e.reason === 'Killing');
    expect(killing?.message).toBe('Stopping container main');
    expect((await refusal(core.deleteNamespacedPod({ namespace: 'default', name }))).code).toBe(404);
  });

  it('SIGKILLs a process that ignores SIGTERM once the grace period is over', async () => {
    const name = uniqueName();
    await core.createNamespacedPod({
      namespace: 'default',
      body: pod(name, { command: ['sh', '-c', "trap '' TERM; echo ready; while true; do sleep 0.05; done"] }),
    });
    await until('trap set', () => api.containerLogs('default', name) === 'ready\n');
    const t0 = Date.now();
    await core.deleteNamespacedPod({ namespace: 'default', name, body: { gracePeriodSeconds: 1 } });
    await until('gone', () => !api.pod('default', name));
    expect(Date.now() - t0).toBeGreaterThanOrEqual(900);
  });

  it('close() leaves no process behind', async () => {
    const other = await startFakeKubeApi();
    const okc = new k8s.KubeConfig();
    okc.loadFromFile(other.kubeconfigPath);
    const c = okc.makeApiClient(k8s.CoreV1Api);
    await c.createNamespacedPod({
      namespace: 'default',
      body: pod('sleeper', { command: ['sh', '-c', 'sleep 100 & sleep 100'] }),
    });
    await until('Running', () => other.pod('default', 'sleeper')?.status?.phase === 'Running');
    const pids = other.processes();
    expect(pids).toHaveLength(1);
    await other.close();
    expect(pids.every((p) => !isAlive(p))).toBe(true);
    expect(existsSync(other.kubeconfigPath)).toBe(false);
  });
});

describe('pods that cannot start', () => {
  const reasonOf = (name: string) => api.pod('default', name)?.status?.containerStatuses?.[0]?.state?.waiting?.reason;

  it('an image that cannot be pulled: ErrImagePull, then ImagePullBackOff, with Failed and BackOff events', async () => {
    const name = uniqueName();
    await core.createNamespacedPod({
      namespace: 'default',
      body: pod(name, { image: 'registry.example.com/nonexistent:1' }),
    });
    await until('ErrImagePull', () => reasonOf(name) === 'ErrImagePull');
    await until('ImagePullBackOff', () => reasonOf(name) === 'ImagePullBackOff');
    expect(api.pod('default', name).status.phase).toBe('Pending');
    const events = (
      await core.listNamespacedEvent({ namespace: 'default', fieldSelector: `involvedObject.name=${name}` })
    ).items;
    expect(events.map((e) => e.message)).toEqual(
      expect.arrayContaining([
        'Error: ErrImagePull',
        'Error: ImagePullBackOff',
        'Back-off pulling image "registry.example.com/nonexistent:1"',
      ]),
    );
    expect(events.find((e) => e.message?.startsWith('Failed to pull image'))?.type).toBe('Warning');
    await core.deleteNamespacedPod({ namespace: 'default', name });
    await until('gone', () => !api.pod('default', name));
  });

  it('an invalid image name: InvalidImageName', async () => {
    const name = uniqueName();
    await core.createNamespacedPod({ namespace: 'default', body: pod(name, { image: 'Not A Valid/Image' }) });
    await until('InvalidImageName', () => reasonOf(name) === 'InvalidImageName');
    expect(api.events('default', name).map((e) => e.message)).toContain('Error: InvalidImageName');
  });

  it('an env var from a missing secret: CreateContainerConfigError, and it starts once the secret exists', async () => {
    const name = uniqueName();
    await core.createNamespacedPod({
      namespace: 'default',
      body: pod(name, {
        command: ['sh', '-c', 'echo "$PASSWORD"'],
        env: [{ name: 'PASSWORD', valueFrom: { secretKeyRef: { name: 'db', key: 'password' } } }],
      }),
    });
    await until('CreateContainerConfigError', () => reasonOf(name) === 'CreateContainerConfigError');
    expect(api.pod('default', name).status.containerStatuses[0].state.waiting.message).toBe('secret "db" not found');
    expect(api.events('default', name).map((e) => e.message)).toContain('Error: secret "db" not found');
    api.setSecret('default', 'db', { password: 's3cret' });
    await until('Succeeded', () => api.pod('default', name)?.status?.phase === 'Succeeded');
    expect(api.containerLogs('default', name)).toBe('s3cret\n');
  });

  it('requests beyond every node: Unschedulable with the scheduler message and a FailedScheduling event', async () => {
    const name = uniqueName();
    await core.createNamespacedPod({
      namespace: 'default',
      body: pod(name, { resources: { requests: { cpu: '64' } } }),
    });
    const cond = await until('Unschedulable', () =>
      api.pod('default', name)?.status?.conditions?.find((c: any) => c.type === 'PodScheduled' && c.status === 'False'),
    );
    expect(cond.reason).toBe('Unschedulable');
    expect(cond.message).toBe(
      '0/3 nodes are available: 3 Insufficient cpu. preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod.',
    );
    const ev = (
      await core.listNamespacedEvent({
        namespace: 'default',
        fieldSelector: `involvedObject.name=${name},reason=FailedScheduling`,
      })
    ).items;
    expect(ev).toHaveLength(1);
    expect(ev[0]).toMatchObject({ type: 'Warning', message: cond.message, source: { component: 'default-scheduler' } });
    // Never bound: a delete removes it at once.
    const gone = await core.deleteNamespacedPod({ namespace: 'default', name, gracePeriodSeconds: 30 });
    expect(gone.metadata?.name).toBe(name);
    expect(api.pod('default', name)).toBeUndefined();
  });

  it('a nodeSelector no node matches, or a taint the pod does not tolerate: Unschedulable, preemption not helpful', async () => {
    const tainted = await startFakeKubeApi({
      kubelet: 'processes',
      nodes: {
        count: 2,
        cpu: '2',
        memory: '4Gi',
        labels: { pool: 'batch' },
        taints: [{ key: 'dedicated', value: 'leoflow', effect: 'NoSchedule' }],
      },
    });
    try {
      const tkc = new k8s.KubeConfig();
      tkc.loadFromFile(tainted.kubeconfigPath);
      const c = tkc.makeApiClient(k8s.CoreV1Api);
      const message = async (name: string) =>
        (
          await until('Unschedulable', () =>
            tainted
              .pod('default', name)
              ?.status?.conditions?.find((x: any) => x.type === 'PodScheduled' && x.status === 'False'),
          )
        ).message;
      await c.createNamespacedPod({ namespace: 'default', body: pod('no-toleration', { command: ['true'] }) });
      expect(await message('no-toleration')).toBe(
        '0/2 nodes are available: 2 node(s) had untolerated taint {dedicated: leoflow}. preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling.',
      );
      const tolerations = [{ key: 'dedicated', operator: 'Equal', value: 'leoflow', effect: 'NoSchedule' }];
      await c.createNamespacedPod({
        namespace: 'default',
        body: pod('wrong-pool', { command: ['true'] }, { tolerations, nodeSelector: { pool: 'gpu' } }),
      });
      expect(await message('wrong-pool')).toBe(
        "0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector. preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling.",
      );
      await c.createNamespacedPod({
        namespace: 'default',
        body: pod('fits', { command: ['true'] }, { tolerations, nodeSelector: { pool: 'batch' } }),
      });
      await until('Succeeded', () => tainted.pod('default', 'fits')?.status?.phase === 'Succeeded');
    } finally {
      await tainted.close();
    }
  });

  it('a lost node turns its pods Unknown, and a pod deleted from outside is DELETED while it runs', async () => {
    const a = uniqueName();
    const b = uniqueName();
    await core.createNamespacedPod({ namespace: 'default', body: pod(a) });
    await core.createNamespacedPod({ namespace: 'default', body: pod(b) });
    await until(
      'both running',
      () => api.pod('default', a)?.status?.phase === 'Running' && api.pod('default', b)?.status?.phase === 'Running',
    );
    api.loseNode('default', a);
    const lost = api.pod('default', a);
    expect(lost.status.phase).toBe('Unknown');
    expect(lost.status.reason).toBe('NodeLost');
    expect(lost.status.conditions.find((c: any) => c.type === 'Ready')).toMatchObject({
      status: 'False',
      reason: 'NodeLost',
    });
    expect(api.events('default', a).find((e) => e.reason === 'NodeNotReady')).toMatchObject({
      type: 'Warning',
      source: { component: 'node-controller' },
    });
    const types: string[] = [];
    const ctl = await new k8s.Watch(kc).watch(
      '/api/v1/namespaces/default/pods',
      { resourceVersion: api.resourceVersion(), fieldSelector: `metadata.name=${b}` },
      (t) => types.push(t),
      () => undefined,
    );
    api.deleteFromOutside('default', b);
    await until('DELETED', () => types.includes('DELETED'));
    ctl.abort();
    expect(api.pod('default', b)).toBeUndefined();
    api.deleteFromOutside('default', a);
  });
});
