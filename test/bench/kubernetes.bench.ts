import { randomUUID } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import pino from 'pino';
import { expect, it } from 'vitest';
import type { Attempt } from '../../src/core/attempt.js';
import { createDispatchPool } from '../../src/dispatch/pool.js';
import { createKubernetesExecutor } from '../../src/executors/kubernetes/kubernetes-executor.js';
import { loadKubeConfig } from '../../src/executors/kubernetes/load-kube-config.js';
import { startFakeKubeApi } from '../helpers/fake-kube/index.js';
import { freePort } from '../helpers/global-setup.js';
import { cli, startServer, waitFor } from '../helpers/leoflow-process.js';
import { createTestDatabase } from '../helpers/test-database.js';
import { percentile, report } from './report.js';
import { runSucceeds } from './run-succeeds.js';
import { proServerArgs } from '../helpers/fake-kube/pro-server-args.js';
import { endsReporter, podSettings, quietStore, testAttempt } from '../helpers/fake-kube/test-executor.js';

/**
 * The kubernetes executor against the fake API server. (1) Pods dispatched per second through
 * Pro's pool (16 drainers) when every API request takes 0, 100 or 500 ms, next to the ceiling of
 * 16 / latency, and the TCP connections the fake accepted meanwhile, per 200 creates: the executor
 * in-process, its creates the only work, the fake's kubelet manual.
 * (2) Trigger → pod created → attempt started, p50/p99: the real `leoflow server --edition pro`
 * and pods running the real `leoflow agent --once` (a Node start each), at 100 ms API latency,
 * one single-task run at a time.
 */

const NS = 'leoflow';
const DRAINERS = 16;
const logger = pino({ level: 'silent' });

it('pods dispatched per second at 0, 100 and 500 ms API latency, against the ceiling 16 / latency, and connections opened per 200 creates', async () => {
  const rows: Record<string, string | number>[] = [];
  for (const latencyMs of [0, 100, 500]) {
    const kube = await startFakeKubeApi({ namespaces: [NS], kubelet: 'manual' });
    const ex = createKubernetesExecutor({
      kubeConfig: loadKubeConfig({ kind: 'file', path: kube.kubeconfigPath }),
      pods: podSettings(NS, { image: 'leoflow:bench', serverUrl: 'http://cp:7070', podPendingTimeoutMs: 600_000 }),
      reporter: endsReporter(),
      store: quietStore({ lost: async () => false, standings: async () => new Map() }),
      logger,
    });
    await ex.lead(true);
    kube.setLatency(latencyMs);
    const n = latencyMs === 0 ? 200 : Math.round((DRAINERS * 5 * 1000) / latencyMs);
    const connectionsBefore = kube.connectionsOpened;
    let done = 0;
    const pool = createDispatchPool<Attempt>({
      workers: DRAINERS,
      capacity: 256 * 8,
      key: (a) => a.tiId,
      logger,
      dispatch: (a) => ex.dispatch(a),
      onDispatched: () => void done++,
    });
    const started = performance.now();
    for (let i = 0; i < n; i++) {
      pool.offer(testAttempt({ tiId: String(i + 1), runId: String(i + 1), dagId: 'bench', taskId: 't', maxTries: 1 }));
    }
    await waitFor('every pod created', async () => done === n, 120_000, 5);
    const seconds = (performance.now() - started) / 1000;
    expect(kube.pods(NS).length).toBe(n);
    const ceiling = latencyMs === 0 ? null : DRAINERS / (latencyMs / 1000);
    const connections = kube.connectionsOpened - connectionsBefore;
    rows.push({
      'API latency ms': latencyMs,
      pods: n,
      'pods/s': +(n / seconds).toFixed(1),
      'ceiling 16/latency': ceiling ?? '–',
      'of ceiling': ceiling === null ? '–' : `${Math.round((100 * n) / seconds / ceiling)} %`,
      'connections per 200 creates': Math.round((connections * 200) / n),
    });
    await pool.close();
    await ex.shutdown(0);
    await kube.close();
  }
  await report('kubernetes-dispatch', rows, { load: os.loadavg() });
});

it('trigger → pod created → attempt started, p50/p99, at 100 ms API latency', async () => {
  const RUNS = 20;
  const db = await createTestDatabase();
  const kube = await startFakeKubeApi({ namespaces: [NS], latencyMs: 100 });
  const tmp = await mkdtemp(path.join(os.tmpdir(), 'leoflow-kube-bench-'));
  const port = await freePort();
  const server = await startServer({
    env: { DATABASE_URL: db.url },
    args: [...proServerArgs({ port, kube, namespace: NS, image: 'leoflow:bench' })],
  });
  try {
    const file = path.join(tmp, 'one.yaml');
    await writeFile(file, 'dag_id: one\ntasks:\n  - { id: t, command: ["true"] }\n');
    const applied = await cli(server.url, ['dag', 'apply', file]);
    expect(applied.code, applied.stderr + applied.stdout).toBe(0);
    const toCreated: number[] = [];
    const toStarted: number[] = [];
    const { createClients } = await import('../../src/cli/client.js');
    const api = createClients(server.url);
    for (let i = 0; i < RUNS; i++) {
      const since = kube.requests().length;
      const t0 = Date.now();
      const runId = (await api.workflow.triggerRun({ dagId: 'one', runKey: `r${i}` })).run!.runId;
      const startedAt = await waitFor(
        'started',
        async () => {
          const [t] = await db.sql<
            { started_at: Date | null; state: string }[]
          >`select started_at, state from task_instances where run_id = ${runId}`;
          return t?.started_at ?? null;
        },
        60_000,
        5,
      );
      const create = kube
        .requests()
        .slice(since)
        .find((r) => r.verb === 'create' && r.status === 201)!;
      toCreated.push(create.at + create.durationMs - t0);
      toStarted.push(startedAt.getTime() - t0);
      await runSucceeds(db.sql, runId, 60_000, 20);
    }
    await report(
      'kubernetes-start-latency',
      [
        {
          step: 'trigger → pod created',
          'p50 ms': percentile(toCreated, 50),
          'p99 ms': percentile(toCreated, 99),
          runs: RUNS,
        },
        {
          step: 'trigger → attempt started (agent in the pod)',
          'p50 ms': percentile(toStarted, 50),
          'p99 ms': percentile(toStarted, 99),
          runs: RUNS,
        },
      ],
      { load: os.loadavg(), apiLatencyMs: 100 },
    );
  } finally {
    await server.stop();
    await kube.close();
    await db.drop();
    await rm(tmp, { recursive: true, force: true });
  }
});
