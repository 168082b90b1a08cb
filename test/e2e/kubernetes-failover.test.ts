import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createClients } from '../../src/cli/client.js';
import { podName } from '../../src/core/pod-identity.js';
import { startFakeKubeApi, type FakeKubeApi } from '../helpers/fake-kube/index.js';
import { freePort } from '../helpers/global-setup.js';
import { cli, startServer, waitFor, type ServerProcess } from '../helpers/leoflow-process.js';
import { createTestDatabase, type TestDatabase } from '../helpers/test-database.js';
import { proServerArgs } from '../helpers/fake-kube/pro-server-args.js';

/**
 * Three Pro replicas on one Postgres, their pods on the fake API server running the real
 * `leoflow agent --once`. The leader is SIGKILLed while every task runs in its pod: a standby
 * takes the lead, adopts the running pods (their agents reconnect to a live replica), and every
 * run finishes with each attempt's pod created once and no task retried.
 */

const NS = 'leoflow';
let db: TestDatabase;
let kube: FakeKubeApi;
let tmp: string;
const servers: ServerProcess[] = [];

beforeAll(async () => {
  db = await createTestDatabase();
  kube = await startFakeKubeApi({ namespaces: [NS] });
  tmp = await mkdtemp(path.join(os.tmpdir(), 'leoflow-kube-failover-'));
}, 60_000);

afterAll(async () => {
  for (const s of servers) await s.kill();
  await kube?.close();
  await db?.drop();
  await rm(tmp, { recursive: true, force: true });
});

it(
  'a standby leads after the leader is SIGKILLed, adopts the live pods, and every run finishes with one pod per attempt',
  { timeout: 180_000 },
  async () => {
    const ports = [await freePort(), await freePort(), await freePort()];
    const urls = ports.map((p) => `http://127.0.0.1:${p}`);
    for (const [i, port] of ports.entries()) {
      servers.push(
        await startServer({
          env: { DATABASE_URL: db.url },
          args: [
            ...proServerArgs({ port, kube, namespace: NS, podServerUrl: urls.join(',') }),
            '--replica-id',
            `r${i + 1}`,
            '--leader-watchdog',
            '1s',
          ],
        }),
      );
      if (i === 0)
        await waitFor(
          'r1 leads',
          async () => (await createClients(urls[0]!).cluster.getLeader({})).leaderId === 'r1',
          20_000,
        );
    }
    const file = path.join(tmp, 'work.yaml');
    await writeFile(
      file,
      [
        'dag_id: work',
        'tasks:',
        ...[0, 1, 2].map((i) => `  - { id: t${i}, command: ["sh", "-c", "sleep 6; echo done ${i}"] }`),
        '',
      ].join('\n'),
    );
    expect((await cli(urls[1]!, ['dag', 'apply', file])).code).toBe(0);
    const runs: string[] = [];
    for (let i = 0; i < 2; i++)
      runs.push(
        (
          JSON.parse(
            (await cli(urls[1]!, ['run', 'trigger', 'work', '--key', `k${i}`, '--output', 'json'])).stdout,
          ) as { run_id: string }
        ).run_id,
      );

    await waitFor(
      'every task running in its pod',
      async () => {
        const [r] = await db.sql<
          { n: number }[]
        >`select count(*)::int as n from task_instances where state = 'running'`;
        return r!.n === 6;
      },
      60_000,
      100,
    );
    await servers[0]!.kill();

    const standby = createClients(urls[1]!);
    await waitFor(
      'a standby leads',
      async () => ['r2', 'r3'].includes((await standby.cluster.getLeader({})).leaderId),
      30_000,
      100,
    );
    const leader = servers[(await standby.cluster.getLeader({})).leaderId === 'r2' ? 1 : 2]!;
    const adoption = await waitFor(
      'the new leader adopted the pods',
      async () => leader.logs.find((l) => l.msg === 'took the lead: pods adopted'),
      20_000,
    );
    expect(Number(adoption.adopted), 'pods of running attempts followed by the new leader').toBeGreaterThan(0);
    expect(adoption.deleted).toBe(0);
    await waitFor(
      'every run finished',
      async () => {
        const rows = await db.sql<{ state: string }[]>`select state from dag_runs where id = any(${runs}::bigint[])`;
        return rows.length === 2 && rows.every((r) => r.state !== 'running' && r.state !== 'queued');
      },
      90_000,
      200,
    );

    const tis = await db.sql<
      { id: string; run_id: string; task_id: string; state: string; try_number: number; attempt_token: string }[]
    >`
    select id, run_id, task_id, state, try_number, attempt_token from task_instances where run_id = any(${runs}::bigint[])`;
    expect(tis.map((t) => t.state)).toEqual(Array(6).fill('success'));
    for (const t of tis) {
      expect(t.try_number).toBe(1);
      expect(
        kube.createCount(
          NS,
          podName({
            dagId: 'work',
            runId: t.run_id,
            taskId: t.task_id,
            tiId: t.id,
            tryNumber: 1,
            attemptToken: t.attempt_token,
          }),
        ),
      ).toBe(1);
    }
  },
);
