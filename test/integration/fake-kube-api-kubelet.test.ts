/**
 * The fake Kubernetes API's kubelet details: image pulls, restarts, logs, grace periods and the
 * events a real kubelet records.
 */
import * as k8s from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { isAlive } from '../helpers/process-group.js';
import { expectStatus, pod, refusal, uniqueName, until } from '../helpers/fake-kube/fake-kube-client.js';
import { fakeKubeClientForFile } from '../helpers/fake-kube/fake-kube-client-for-file.js';

const k = fakeKubeClientForFile();

describe('kubelet details', () => {
  const stateOf = (name: string, i = 0) => k.api.pod('default', name)?.status?.containerStatuses?.[i]?.state;

  it('restartPolicy OnFailure restarts a failing container with CrashLoopBackOff and a rising restartCount', async () => {
    const name = uniqueName();
    await k.core.createNamespacedPod({
      namespace: 'default',
      body: pod(name, { command: ['sh', '-c', 'exit 1'] }, { restartPolicy: 'OnFailure' }),
    });
    const cs = await until('two restarts', () => {
      const c = k.api.pod('default', name)?.status?.containerStatuses?.[0];
      return c?.restartCount >= 2 && c;
    });
    expect(cs.lastState.terminated).toMatchObject({ exitCode: 1, reason: 'Error' });
    expect(k.api.pod('default', name).status.phase).toBe('Running');
    expect(
      k.api
        .events('default', name)
        .some((e) => e.reason === 'BackOff' && e.message.startsWith('Back-off restarting failed container main')),
    ).toBe(true);
    await k.core.deleteNamespacedPod({ namespace: 'default', name, gracePeriodSeconds: 1 });
    await until('gone', () => !k.api.pod('default', name));
  });

  it('imagePullPolicy Never: ErrImageNeverPull unless the image is on the node', async () => {
    const name = uniqueName();
    await k.core.createNamespacedPod({
      namespace: 'default',
      body: pod(name, { image: 'leoflow:local', imagePullPolicy: 'Never', command: ['true'] }),
    });
    await until('ErrImageNeverPull', () => stateOf(name)?.waiting?.reason === 'ErrImageNeverPull');
    k.api.preloadImage('leoflow:local');
    const other = uniqueName();
    await k.core.createNamespacedPod({
      namespace: 'default',
      body: pod(other, { image: 'leoflow:local', imagePullPolicy: 'Never', command: ['true'] }),
    });
    await until('Succeeded', () => k.api.pod('default', other)?.status?.phase === 'Succeeded');
    expect(k.api.events('default', other).find((e) => e.reason === 'Pulled')?.message).toBe(
      'Container image "leoflow:local" already present on machine',
    );
  });

  it("resolves a command on the image's PATH, not the host's: not found is a StartError, as runc reports it", async () => {
    // `node` is on this host's PATH, but the Leoflow image has it in /usr/local/bin only.
    const name = uniqueName();
    await k.core.createNamespacedPod({
      namespace: 'default',
      body: pod(name, { image: 'registry.example.com/leoflow:0.1.0', command: ['/usr/bin/node', '-v'] }),
    });
    await until('Failed', () => k.api.pod('default', name)?.status?.phase === 'Failed');
    expect(stateOf(name)?.terminated).toMatchObject({ exitCode: 128, reason: 'StartError' });
    expect(stateOf(name)?.terminated.message).toContain(
      'error during container init: exec: "/usr/bin/node": stat /usr/bin/node: no such file or directory',
    );
    const missing = uniqueName();
    await k.core.createNamespacedPod({
      namespace: 'default',
      body: pod(missing, { image: 'leoflow:test', command: ['nosuch', 'agent'] }),
    });
    await until('Failed', () => k.api.pod('default', missing)?.status?.phase === 'Failed');
    expect(stateOf(missing)?.terminated.message).toContain('exec: "nosuch": executable file not found in $PATH');
    // The shipped image's `leoflow` (a link to /app/bin/leoflow.js, `#!/usr/bin/env node`) runs.
    const ok = uniqueName();
    await k.core.createNamespacedPod({
      namespace: 'default',
      body: pod(ok, { image: 'leoflow:test', command: ['leoflow', '--version'] }),
    });
    await until('Succeeded', () => k.api.pod('default', ok)?.status?.phase === 'Succeeded', 10_000);
    expect(k.api.containerLogs('default', ok)).toContain('0.1.0');
  });

  it('activeDeadlineSeconds: the pod fails with DeadlineExceeded and its process is stopped', async () => {
    const name = uniqueName();
    await k.core.createNamespacedPod({ namespace: 'default', body: pod(name, {}, { activeDeadlineSeconds: 1 }) });
    await until('Running', () => k.api.pod('default', name)?.status?.phase === 'Running');
    const pid = k.api.processes().at(-1)!;
    const p = await until(
      'DeadlineExceeded',
      () => k.api.pod('default', name)?.status?.reason === 'DeadlineExceeded' && k.api.pod('default', name),
      5000,
    );
    expect(p.status).toMatchObject({
      phase: 'Failed',
      message: 'Pod was active on the node longer than the specified deadline',
    });
    await until('stopped', () => stateOf(name)?.terminated);
    expect(stateOf(name).terminated.exitCode).toBe(143);
    expect(isAlive(pid)).toBe(false);
  });

  it('a pod on a lost node stays Terminating after a graceful delete (no kubelet answers) until a force delete', async () => {
    const name = uniqueName();
    await k.core.createNamespacedPod({ namespace: 'default', body: pod(name) });
    await until('Running', () => k.api.pod('default', name)?.status?.phase === 'Running');
    k.api.loseNode('default', name);
    await k.core.deleteNamespacedPod({ namespace: 'default', name, gracePeriodSeconds: 1 });
    await new Promise((r) => setTimeout(r, 1300));
    const stuck = k.api.pod('default', name);
    expect(stuck.metadata.deletionTimestamp).toBeDefined();
    expect(stuck.status.phase).toBe('Unknown');
    await k.core.deleteNamespacedPod({ namespace: 'default', name, gracePeriodSeconds: 0 });
    expect(k.api.pod('default', name)).toBeUndefined();
  });

  it('PATCH and PUT change labels, annotations and images, refuse other spec changes with 422, and a stale resourceVersion with 409', async () => {
    const name = uniqueName();
    const created = await k.core.createNamespacedPod({ namespace: 'default', body: pod(name, {}, {}, { app: 'a' }) });
    // client-node sends a JSON patch (application/json-patch+json) by default.
    const patched = await k.core.patchNamespacedPod({
      namespace: 'default',
      name,
      body: [
        { op: 'add', path: '/metadata/labels/leoflow.io~1adopted', value: 'yes' },
        { op: 'add', path: '/metadata/annotations', value: { note: 'x' } },
      ],
    });
    expect(patched.metadata?.labels).toEqual({ app: 'a', 'leoflow.io/adopted': 'yes' });
    expect(patched.metadata?.annotations).toEqual({ note: 'x' });
    expect(Number(patched.metadata?.resourceVersion)).toBeGreaterThan(Number(created.metadata?.resourceVersion));
    const forbidden = await refusal(
      k.core.patchNamespacedPod({
        namespace: 'default',
        name,
        body: [{ op: 'replace', path: '/spec/restartPolicy', value: 'Always' }],
      }),
    );
    expectStatus(forbidden.body, 422, 'Invalid');
    expect(forbidden.body.message).toMatch(
      /^Pod ".+" is invalid: spec: Forbidden: pod updates may not change fields other than `spec.containers\[\*\].image`/,
    );
    const badLabel = await refusal(
      k.core.patchNamespacedPod({
        namespace: 'default',
        name,
        body: [{ op: 'add', path: '/metadata/labels/bad key', value: 'x' }],
      }),
    );
    expect(badLabel.body.details.causes[0].field).toBe('metadata.labels');
    // Read, change, replace, as a client does: the fake kubelet may report on the pod between the
    // read and the replace (a 409 then, as from a real API server), so the client reads again.
    let current = await k.core.readNamespacedPod({ namespace: 'default', name });
    let replaced: Awaited<ReturnType<typeof k.core.replaceNamespacedPod>> | undefined;
    for (let attempt = 1; !replaced; attempt++) {
      current.spec!.containers[0]!.image = 'busybox:1.37';
      try {
        replaced = await k.core.replaceNamespacedPod({ namespace: 'default', name, body: current });
      } catch (err) {
        if ((err as { code?: number }).code !== 409 || attempt === 10) throw err;
        current = await k.core.readNamespacedPod({ namespace: 'default', name });
      }
    }
    expect(replaced.spec?.containers[0]?.image).toBe('busybox:1.37');
    const stale = await refusal(k.core.replaceNamespacedPod({ namespace: 'default', name, body: current }));
    expectStatus(stale.body, 409, 'Conflict');
    expect(stale.body.message).toBe(
      `Operation cannot be fulfilled on pods "${name}": the object has been modified; please apply your changes to the latest version and try again`,
    );
  });

  it('a delete with a stale uid precondition is refused with 409 Conflict', async () => {
    const name = uniqueName();
    await k.core.createNamespacedPod({ namespace: 'default', body: pod(name) });
    const r = await refusal(
      k.core.deleteNamespacedPod({
        namespace: 'default',
        name,
        body: { preconditions: { uid: '00000000-0000-0000-0000-000000000000' } },
      }),
    );
    expectStatus(r.body, 409, 'Conflict');
    expect(r.body.message).toMatch(
      /^Operation cannot be fulfilled on pods ".+": Precondition failed: UID in precondition: 0{8}-/,
    );
    expect(k.api.pod('default', name)).toBeDefined();
  });
});
