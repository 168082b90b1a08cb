/**
 * kubectl, a client we did not write, against the fake Kubernetes API server: discovery, create
 * from a manifest, server-side printed tables, JSON output, logs, events, a refusal printed from
 * its Status, and a graceful delete. If kubectl can use it as a cluster, its shapes are the real ones.
 * (`--validate=false`: the fake serves no OpenAPI document for client-side validation.)
 */
import { execFile, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFakeKubeApi, type FakeKubeApi } from '../helpers/fake-kube/index.js';

const hasKubectl = spawnSync('kubectl', ['version', '--client'], { stdio: 'ignore' }).status === 0;

describe.skipIf(!hasKubectl)('kubectl against the fake API server', () => {
  let api: FakeKubeApi;
  let dir: string;

  beforeAll(async () => {
    api = await startFakeKubeApi({ tls: true });
    dir = mkdtempSync(join(tmpdir(), 'fake-kube-kubectl-'));
  });

  afterAll(async () => {
    await api.close();
    rmSync(dir, { recursive: true, force: true });
  });

  // Asynchronous: the fake serves from this process's event loop.
  async function kubectl(...args: string[]): Promise<{ ok: boolean; out: string; err: string }> {
    try {
      const r = await promisify(execFile)('kubectl', ['--kubeconfig', api.kubeconfigPath, ...args], {
        encoding: 'utf8',
      });
      return { ok: true, out: r.stdout, err: r.stderr };
    } catch (e) {
      const x = e as { stdout?: string; stderr?: string };
      return { ok: false, out: x.stdout ?? '', err: x.stderr ?? '' };
    }
  }

  it('creates a pod from a manifest, lists it as a table and as JSON, reads its logs and events, and deletes it', async () => {
    const manifest = join(dir, 'pod.json');
    writeFileSync(
      manifest,
      JSON.stringify({
        apiVersion: 'v1',
        kind: 'Pod',
        metadata: { name: 'hello', labels: { app: 'hello' } },
        spec: {
          restartPolicy: 'Never',
          containers: [
            { name: 'main', image: 'busybox:1.36', command: ['sh', '-c', 'echo hello from the fake; sleep 30'] },
          ],
        },
      }),
    );
    expect((await kubectl('create', '--validate=false', '-f', manifest)).out.trim()).toBe('pod/hello created');
    const deadline = Date.now() + 10_000;
    while (api.pod('default', 'hello')?.status?.phase !== 'Running' && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, 20));
    const table = (await kubectl('get', 'pods', '-l', 'app=hello')).out.split('\n');
    expect(table[0]).toMatch(/^NAME\s+READY\s+STATUS\s+RESTARTS\s+AGE$/);
    expect(table[1]).toMatch(/^hello\s+1\/1\s+Running\s+0\s+\d+s$/);
    const json = JSON.parse((await kubectl('get', 'pod', 'hello', '-o', 'json')).out);
    expect(json).toMatchObject({
      kind: 'Pod',
      apiVersion: 'v1',
      metadata: { name: 'hello', namespace: 'default' },
      status: { phase: 'Running' },
    });
    expect((await kubectl('logs', 'hello')).out).toBe('hello from the fake\n');
    const events = (await kubectl('get', 'events', '--field-selector', 'involvedObject.name=hello', '-o', 'json')).out;
    expect(JSON.parse(events).items.map((e: { reason: string }) => e.reason)).toEqual(
      expect.arrayContaining(['Scheduled', 'Pulling', 'Pulled', 'Created', 'Started']),
    );
    expect((await kubectl('describe', 'pod', 'hello')).out).toMatch(/Successfully assigned default\/hello to node-\d/);
    expect((await kubectl('label', 'pod', 'hello', 'tier=batch')).out.trim()).toBe('pod/hello labeled');
    expect((await kubectl('annotate', 'pod', 'hello', 'leoflow.io/note=checked')).out.trim()).toBe(
      'pod/hello annotated',
    );
    expect(api.pod('default', 'hello').metadata).toMatchObject({
      labels: { app: 'hello', tier: 'batch' },
      annotations: { 'leoflow.io/note': 'checked' },
    });
    expect((await kubectl('delete', 'pod', 'hello', '--grace-period=1')).out.trim()).toBe('pod "hello" deleted');
    expect(api.pod('default', 'hello')).toBeUndefined();
  });

  it('prints the server refusals from their Status: 409, 422 and 404', async () => {
    const manifest = join(dir, 'bad.json');
    writeFileSync(
      manifest,
      JSON.stringify({ apiVersion: 'v1', kind: 'Pod', metadata: { name: 'bad' }, spec: { containers: [] } }),
    );
    const invalid = await kubectl('create', '--validate=false', '-f', manifest);
    expect(invalid.ok).toBe(false);
    expect(invalid.err).toContain('The Pod "bad" is invalid: spec.containers: Required value');
    const missing = await kubectl('get', 'pod', 'nope');
    expect(missing.err.trim()).toBe('Error from server (NotFound): pods "nope" not found');
    writeFileSync(
      manifest,
      JSON.stringify({
        apiVersion: 'v1',
        kind: 'Pod',
        metadata: { name: 'twice' },
        spec: { containers: [{ name: 'c', image: 'busybox', command: ['sleep', '5'] }] },
      }),
    );
    await kubectl('create', '--validate=false', '-f', manifest);
    const dup = await kubectl('create', '--validate=false', '-f', manifest);
    expect(dup.err.trim()).toBe(
      'Error from server (AlreadyExists): error when creating "' + manifest + '": pods "twice" already exists',
    );
  });

  it('deletes pods by label selector (a DELETE on the collection)', async () => {
    for (const [name, group] of [
      ['g1', 'a'],
      ['g2', 'a'],
      ['g3', 'b'],
    ] as const) {
      const manifest = join(dir, `${name}.json`);
      writeFileSync(
        manifest,
        JSON.stringify({
          apiVersion: 'v1',
          kind: 'Pod',
          metadata: { name, labels: { group } },
          spec: { containers: [{ name: 'c', image: 'busybox', command: ['sleep', '30'] }] },
        }),
      );
      await kubectl('create', '--validate=false', '-f', manifest);
    }
    const out = await kubectl('delete', 'pods', '-l', 'group=a', '--grace-period=1');
    expect(out.out.trim().split('\n').sort()).toEqual(['pod "g1" deleted', 'pod "g2" deleted']);
    expect(
      api
        .pods('default')
        .map((p) => p.metadata.name)
        .filter((n: string) => n.startsWith('g')),
    ).toEqual(['g3']);
  });
});
