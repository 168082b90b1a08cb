import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { createClient } from '@connectrpc/connect';
import { createGrpcTransport } from '@connectrpc/connect-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WorkflowService } from '../../src/gen/leoflow/v1/workflow_pb.js';
import { installIdentity } from '../../src/db/install-identity.js';
import { LABEL } from '../../src/core/pod-identity.js';
import { startFakeKubeApi, type FakeKubeApi } from '../helpers/fake-kube/index.js';
import { freePort } from '../helpers/global-setup.js';
import { cli, startServer, waitFor, type ServerProcess } from '../helpers/leoflow-process.js';
import { createTestDatabase, type TestDatabase } from '../helpers/test-database.js';
import { proServerArgs } from '../helpers/fake-kube/pro-server-args.js';

/**
 * Two installs (staging and production, say), each a `leoflow server --edition pro` on its own
 * database, sharing one namespace of the fake API server with the shipped defaults. Their task
 * instance ids start at 1 in both, so only the install label tells their pods apart.
 */

const NS = 'shared';
let kube: FakeKubeApi;
let tmp: string;

interface Install {
  db: TestDatabase;
  port: number;
  server: ServerProcess;
}
const installs: Install[] = [];

async function start(i: Pick<Install, 'db' | 'port'>): Promise<ServerProcess> {
  return startServer({
    env: { DATABASE_URL: i.db.url },
    args: proServerArgs({ port: i.port, kube, namespace: NS }),
  });
}

async function runOf(i: Install, dagId: string, command: string): Promise<string> {
  const file = path.join(tmp, `${dagId}-${i.port}.yaml`);
  await writeFile(
    file,
    `dag_id: ${dagId}\ntasks:\n  - id: t\n    retries: 2\n    command: ["sh", "-c", ${JSON.stringify(command)}]\n`,
  );
  const applied = await cli(i.server.url, ['dag', 'apply', file]);
  expect(applied.code, applied.stderr).toBe(0);
  const r = await cli(i.server.url, ['run', 'trigger', dagId, '--output', 'json']);
  expect(r.code, r.stderr).toBe(0);
  return String((JSON.parse(r.stdout) as { run_id: string }).run_id);
}

async function ti(
  i: Install,
  runId: string,
): Promise<{ id: string; state: string; try_number: number; error: string | null }> {
  const [t] = await i.db.sql<{ id: string; state: string; try_number: number; error: string | null }[]>`
    select id, state, try_number, error from task_instances where run_id = ${runId}`;
  return t!;
}

beforeAll(async () => {
  kube = await startFakeKubeApi({ namespaces: [NS] });
  tmp = await mkdtemp(path.join(os.tmpdir(), 'leoflow-installs-'));
  for (let n = 0; n < 2; n++) {
    const i = { db: await createTestDatabase(), port: await freePort() };
    installs.push({ ...i, server: await start(i) });
  }
}, 90_000);

afterAll(async () => {
  for (const i of installs) await i.server?.stop();
  await kube?.close();
  for (const i of installs) await i.db?.drop();
  await rm(tmp, { recursive: true, force: true });
});

describe('two installs in one namespace', () => {
  it(
    "never touch each other's pods, through a change of leader, though their ti ids are the same",
    { timeout: 90_000 },
    async () => {
      const [a, b] = installs as [Install, Install];
      const runA = await runOf(a, 'long', 'sleep 4; echo a');
      const runB = await runOf(b, 'long', 'sleep 4; echo b');
      const tA = await waitFor(
        'A running',
        async () => ((await ti(a, runA)).state === 'running' ? ti(a, runA) : null),
        20_000,
      );
      const tB = await waitFor(
        'B running',
        async () => ((await ti(b, runB)).state === 'running' ? ti(b, runB) : null),
        20_000,
      );
      expect(tA.id).toBe(tB.id);
      // B's replica dies; the next one takes the lead and looks for strays in the namespace.
      await b.server.kill();
      b.server = await start(b);
      for (const [i, runId] of [
        [a, runA],
        [b, runB],
      ] as const) {
        const done = await waitFor(
          `run ${runId} over`,
          async () => {
            const t = await ti(i, runId);
            return ['success', 'failed', 'up_for_retry'].includes(t.state) || t.try_number > 1 ? t : null;
          },
          40_000,
          100,
        );
        expect(done, done.error ?? '').toMatchObject({ state: 'success', try_number: 1 });
      }
      // One pod each, each labelled with its own install's id, and neither ever deleted by anyone.
      const pods: string[] = [];
      for (const i of [a, b]) {
        const id = await installIdentity(i.db.sql);
        const name = kube.postedPodName({ [LABEL.ti]: tA.id, [LABEL.try]: '1', 'leoflow.io/install': id });
        expect(name, `the pod of install ${id}`).toBeDefined();
        expect(kube.createCount(NS, name!)).toBe(1);
        pods.push(name!);
      }
      expect(new Set(pods).size).toBe(2);
      // Two databases cloned from one template share migration 020's random id: the install ids differ all the same.
      expect(await a.db.sql`select id from leoflow_install`).toEqual(await b.db.sql`select id from leoflow_install`);
      // (A pod deleted early would have failed its run above with POD_DELETED; finished ones are removed by retention.)
    },
  );

  it(
    'run 50 runs each through two leader changes, each task once, on its first try',
    { timeout: 240_000 },
    async () => {
      const [a, b] = installs as [Install, Install];
      const runs = new Map<Install, string[]>([
        [a, []],
        [b, []],
      ]);
      for (const i of [a, b]) {
        const file = path.join(tmp, `many-${i.port}.yaml`);
        await writeFile(
          file,
          'dag_id: many\nmax_active_runs: 50\ntasks:\n  - id: t\n    retries: 2\n    command: ["sh", "-c", "sleep 8"]\n',
        );
        const applied = await cli(i.server.url, ['dag', 'apply', file]);
        expect(applied.code, applied.stderr).toBe(0);
      }
      const trigger = async (i: Install, n: number): Promise<void> => {
        const client = createClient(WorkflowService, createGrpcTransport({ baseUrl: i.server.url }));
        for (let k = 0; k < n; k++) runs.get(i)!.push((await client.triggerRun({ dagId: 'many' })).run!.runId);
      };
      // This install's leader is killed once its tasks are dispatched (their pods made, starting or running).
      const running = (i: Install) =>
        waitFor(
          'a task of this install dispatched',
          async () => {
            const [r] = await i.db.sql`
            select 1 from task_instances
            where run_id = any(${runs.get(i)!}::bigint[]) and state in ('queued', 'running') limit 1`;
            return r ?? null;
          },
          60_000,
          50,
        );
      // Each install's leader dies once, with tasks of both running in the shared namespace.
      await Promise.all([trigger(a, 25), trigger(b, 25)]);
      await running(b);
      await b.server.kill();
      b.server = await start(b);
      await Promise.all([trigger(a, 25), trigger(b, 25)]);
      await running(a);
      await a.server.kill();
      a.server = await start(a);

      for (const i of [a, b]) {
        const ids = runs.get(i)!;
        const ended = await waitFor(
          `${ids.length} runs over`,
          async () => {
            const rows = await i.db.sql<{ state: string; try_number: number; error: string | null; id: string }[]>`
            select ti.state, ti.try_number, ti.error, ti.id::text
            from task_instances ti where ti.run_id = any(${ids}::bigint[])`;
            const over = rows.filter((t) => t.state !== 'running' && t.state !== 'queued' && t.state !== 'scheduled');
            return over.length === ids.length ? rows : null;
          },
          180_000,
          250,
        );
        // A pod deleted under a running task by the other install would end it POD_DELETED, and its retry would
        // be a second try; a pod of the other install taken for this one's would be created twice.
        expect(ended.filter((t) => t.state !== 'success' || t.try_number !== 1)).toEqual([]);
        const install = await installIdentity(i.db.sql);
        for (const t of ended) {
          const name = kube.postedPodName({ [LABEL.ti]: t.id, [LABEL.try]: '1', 'leoflow.io/install': install });
          expect(name, `pod of ti ${t.id}`).toBeDefined();
          expect(kube.createCount(NS, name!)).toBe(1);
        }
      }
    },
  );
});
