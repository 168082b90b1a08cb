import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LABEL } from '../../src/core/pod-identity.js';
import { startFakeKubeApi, type FakeKubeApi } from '../helpers/fake-kube/index.js';
import { freePort } from '../helpers/global-setup.js';
import { cli, startServer, waitFor, type ServerProcess } from '../helpers/leoflow-process.js';
import { createTestDatabase, type TestDatabase } from '../helpers/test-database.js';

/**
 * Pods end with their attempts, with the Pro edition's defaults (only what the shipped manifests
 * set, and a pod server URL the pods cannot reach): a pod whose agent never connects is not left
 * running until the heartbeat reaper calls its attempt `agent_lost`; it fails the attempt with
 * the pod's last lines, and is deleted.
 */

const NS = 'leoflow';
let db: TestDatabase;
let kube: FakeKubeApi;
let tmp: string;
let server: ServerProcess;

beforeAll(async () => {
  db = await createTestDatabase();
  kube = await startFakeKubeApi({ namespaces: [NS] });
  tmp = await mkdtemp(path.join(os.tmpdir(), 'leoflow-pods-end-'));
  const port = await freePort();
  const nobody = await freePort();
  server = await startServer({
    env: { DATABASE_URL: db.url },
    args: [
      '--edition',
      'pro',
      '--listen',
      `127.0.0.1:${port}`,
      '--kubeconfig',
      kube.kubeconfigPath,
      '--kubernetes-namespace',
      NS,
      '--kubernetes-image',
      'leoflow:test',
      // Nothing listens there: the pods' agents cannot reach the control plane.
      '--pod-server-url',
      `http://127.0.0.1:${nobody}`,
    ],
  });
}, 60_000);

afterAll(async () => {
  await server?.stop();
  await kube?.close();
  await db?.drop();
  await rm(tmp, { recursive: true, force: true });
});

describe('pods end with their attempts', () => {
  it(
    'fails an attempt whose agent never connects, with the pod’s last lines, and deletes its pod',
    { timeout: 150_000 },
    async () => {
      const file = path.join(tmp, 'unreachable.yaml');
      await writeFile(file, 'dag_id: unreachable\ntasks:\n  - id: t\n    command: ["true"]\n');
      expect((await cli(server.url, ['dag', 'apply', file])).code).toBe(0);
      const r = await cli(server.url, ['run', 'trigger', 'unreachable', '--output', 'json']);
      expect(r.code, r.stderr).toBe(0);
      const runId = String((JSON.parse(r.stdout) as { run_id: string }).run_id);
      const t = await waitFor(
        'the attempt ended',
        async () => {
          const [row] = await db.sql<{ id: string; state: string; error: string | null }[]>`
            select id, state, error from task_instances where run_id = ${runId}`;
          return row && !['queued', 'running', 'scheduled', 'none'].includes(row.state) ? row : null;
        },
        120_000,
        250,
      );
      expect(t.error).toMatch(
        /^POD_AGENT_NEVER_CONNECTED: pod lf-unreachable-t-[0-9a-f]{12} ran \d+s and its agent never reported the attempt started to http:\/\/127\.0\.0\.1:\d+ .*; last lines: .+/,
      );
      const pod = kube.postedPodName({ [LABEL.ti]: t.id, [LABEL.try]: '1' })!;
      await waitFor('its pod deleted', async () => kube.pod(NS, pod) === undefined, 30_000);
    },
  );
});
