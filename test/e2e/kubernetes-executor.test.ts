import { randomUUID } from 'node:crypto';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LABEL } from '../../src/core/pod-identity.js';
import { startFakeKubeApi, type FakeKubeApi } from '../helpers/fake-kube/index.js';
import { applyAndTrigger as applyDagAndTrigger, applyDag, triggerByCli } from '../helpers/applied-dag.js';
import { freePort } from '../helpers/global-setup.js';
import { BIN, cli, runCommand, startServer, waitFor, type ServerProcess } from '../helpers/leoflow-process.js';
import { metricSum, scrapeMetrics } from '../helpers/scrape-metrics.js';
import { createTestDatabase, type TestDatabase } from '../helpers/test-database.js';
import { proServerArgs } from '../helpers/fake-kube/pro-server-args.js';

/**
 * The Pro edition's kubernetes executor, end to end: the real `leoflow server --edition pro`
 * talks through @kubernetes/client-node and a kubeconfig to the fake API server, whose kubelet
 * runs each pod's command, the real `leoflow agent --once`, which connects back and runs the
 * task. Each failure shape a real cluster shows ends its attempt with the pod's own reason.
 */

const NS = 'leoflow';
let db: TestDatabase;
let kube: FakeKubeApi;
let tmp: string;
let server: ServerProcess;
let port: number;

interface Ti {
  id: string;
  state: string;
  try_number: number;
  error: string | null;
  pending_reason: string | null;
  dag_id: string;
  run_id: string;
  task_id: string;
}

async function startPro(extra: string[] = [], env: Record<string, string | undefined> = {}): Promise<ServerProcess> {
  return startServer({
    env: { DATABASE_URL: db.url, ...env },
    args: [
      ...proServerArgs({ port, kube, namespace: NS }),
      '--pod-pending-timeout',
      '3s',
      '--kill-grace',
      '2s',
      '--pod-keep-failed',
      '0',
      ...extra,
    ],
  });
}

/** Stops the file's server and starts another with these flags: later tests run on it. */
async function restartPro(extra: string[], env: Record<string, string | undefined> = {}): Promise<void> {
  await server.stop();
  server = await startPro(extra, env);
}

const apply = (yaml: string) => applyDag(server.url, tmp, yaml);
const trigger = (dagId: string) => triggerByCli(server.url, dagId);
const applyAndTrigger = (yaml: string) => applyDagAndTrigger(server.url, tmp, yaml);

async function tiOf(runId: string): Promise<Ti> {
  const [t] = await db.sql<Ti[]>`
    select t.id, t.state, t.try_number, t.error, t.pending_reason, r.dag_id, t.run_id, t.task_id
    from task_instances t join dag_runs r on r.id = t.run_id where t.run_id = ${runId}`;
  return t!;
}

/** The run's task instance once it is in `state`. */
async function tiIn(runId: string, state: string, timeoutMs: number, what: string): Promise<Ti> {
  return waitFor(
    what,
    async () => {
      const t = await tiOf(runId);
      return t.state === state ? t : null;
    },
    timeoutMs,
  );
}

async function ended(runId: string, timeoutMs = 30_000): Promise<Ti> {
  return waitFor(
    `run ${runId} over`,
    async () => {
      const [r] = await db.sql<{ state: string }[]>`select state from dag_runs where id = ${runId}`;
      return r && ['success', 'failed', 'cancelled'].includes(r.state) ? tiOf(runId) : null;
    },
    timeoutMs,
    50,
  );
}

/** The pod of a TI's try, by the labels of what was POSTed (its name hashes the attempt's token). */
const podOf = (t: Ti, tryNumber = t.try_number) =>
  kube.postedPodName({ [LABEL.ti]: t.id, [LABEL.try]: String(tryNumber) }) ??
  `(no pod posted for ti ${t.id} try ${tryNumber})`;

beforeAll(async () => {
  db = await createTestDatabase();
  kube = await startFakeKubeApi({ namespaces: [NS] });
  tmp = await mkdtemp(path.join(os.tmpdir(), 'leoflow-kube-'));
  port = await freePort();
  server = await startPro();
}, 60_000);

afterAll(async () => {
  await server?.stop();
  await kube?.close();
  await db?.drop();
  await rm(tmp, { recursive: true, force: true });
});

describe('the kubernetes executor against the fake API server', () => {
  it(
    'runs a task in its pod: one create, the agent inside reports it, the succeeded pod is removed',
    { timeout: 60_000 },
    async () => {
      const runId = await applyAndTrigger(
        'dag_id: hello\ntasks:\n  - id: say\n    command: ["sh", "-c", "echo hello from $LEOFLOW_TASK_ID"]\n',
      );
      const t = await ended(runId);
      expect(t).toMatchObject({ state: 'success', try_number: 1 });
      expect(kube.createCount(NS, podOf(t))).toBe(1);
      const lines = await db.sql<
        { line: string }[]
      >`select line from task_logs where ti_id = ${t.id} and stream = 'stdout'`;
      expect(lines.map((l) => l.line)).toContain('hello from say');
      await waitFor('the succeeded pod deleted', async () => kube.pod(NS, podOf(t)) === undefined, 10_000);
      // Its agent (named after the pod) is forgotten with it: no row per pod piles up.
      await waitFor(
        "the pod's agent forgotten",
        async () => (await db.sql`select 1 from agents where agent_id = ${podOf(t)}`).length === 0,
        10_000,
      );
    },
  );

  it(
    "fails an attempt whose image cannot be pulled at once, with the pod's reason, and retries it",
    { timeout: 60_000 },
    async () => {
      const runId = await applyAndTrigger(
        'dag_id: pull\ntasks:\n  - id: p\n    command: ["true"]\n    retries: 1\n    retry_delay: 1s\n    kubernetes: { image: registry.example/nonexistent:1 }\n',
      );
      const t = await ended(runId);
      expect(t.state).toBe('failed');
      expect(t.try_number).toBe(2);
      expect(t.error).toMatch(/^POD_CANNOT_START:(ErrImagePull|ImagePullBackOff)/);
      await waitFor(
        'both pods deleted',
        async () => kube.pod(NS, podOf(t, 1)) === undefined && kube.pod(NS, podOf(t, 2)) === undefined,
        10_000,
      );
    },
  );

  it(
    'says why a pod is pending, then fails it unschedulable past --pod-pending-timeout',
    { timeout: 60_000 },
    async () => {
      const runId = await applyAndTrigger(
        'dag_id: big\ntasks:\n  - id: b\n    command: ["true"]\n    kubernetes: { resources: { requests: { cpu: "64" } } }\n',
      );
      const pending = await waitFor(
        "the pod's pending reason",
        async () => {
          const r = (await tiOf(runId)).pending_reason;
          return r?.startsWith('POD_') ? r : null;
        },
        10_000,
      );
      expect(pending).toMatch(/^POD_PENDING:Unschedulable:0\/3 nodes are available/);
      const show = await cli(server.url, ['run', 'show', runId]);
      expect(show.stdout).toContain('POD_PENDING:Unschedulable');
      const t = await ended(runId);
      expect(t.state).toBe('failed');
      expect(t.error).toMatch(/^POD_UNSCHEDULABLE:0\/3 nodes are available.*\(pending longer than 3s\)$/);
      await waitFor('the pod deleted', async () => kube.pod(NS, podOf(t)) === undefined, 10_000);
    },
  );

  it(
    'fails an attempt whose create the API server refuses, once per try, never in a loop',
    { timeout: 60_000 },
    async () => {
      const runId = await applyAndTrigger(
        'dag_id: nowhere\ntasks:\n  - id: n\n    command: ["true"]\n    retries: 1\n    retry_delay: 1s\n    kubernetes: { namespace: missing }\n',
      );
      const t = await ended(runId);
      expect(t.state).toBe('failed');
      expect(t.error).toMatch(/^POD_CREATE_REFUSED:404 NotFound: namespaces "missing" not found/);
      expect(kube.createAttempts('missing', podOf(t, 1))).toBe(1);
      expect(kube.createAttempts('missing', podOf(t, 2))).toBe(1);
    },
  );

  it(
    'retries a create refused with 429 after its Retry-After, and creates the pod once',
    { timeout: 60_000 },
    async () => {
      await apply('dag_id: busy\ntasks:\n  - id: x\n    command: ["true"]\n');
      kube.failNext({ verb: 'create', namespace: NS, status: 429, retryAfterSeconds: 1 });
      const started = Date.now();
      const runId = await trigger('busy');
      const t = await ended(runId);
      expect(t.state).toBe('success');
      const creates = kube.requests().filter((r) => r.verb === 'create' && r.namespace === NS && r.at >= started);
      expect(creates.map((r) => r.status)).toEqual([429, 201]);
      expect(creates[1]!.at - creates[0]!.at, 'the second create waited for Retry-After').toBeGreaterThanOrEqual(1000);
      expect(kube.createCount(NS, podOf(t))).toBe(1);
    },
  );

  it(
    'ends an attempt whose pod is deleted from outside as lost at once, and retries it',
    { timeout: 60_000 },
    async () => {
      const runId = await applyAndTrigger(
        'dag_id: doomed\ntasks:\n  - id: d\n    command: ["sh", "-c", "[ \\"$LEOFLOW_TRY_NUMBER\\" = 1 ] && sleep 60; echo try $LEOFLOW_TRY_NUMBER"]\n    retries: 1\n    retry_delay: 1s\n',
      );
      const first = await tiIn(runId, 'running', 20_000, 'try 1 running');
      const at = Date.now();
      kube.deleteFromOutside(NS, podOf(first));
      const lost = await waitFor(
        'try 1 lost',
        async () => {
          const [e] = await db.sql<
            { payload: { error: string } }[]
          >`select payload from events where ti_id = ${first.id} and payload->>'reason' = 'pod_lost'`;
          return e?.payload ?? null;
        },
        10_000,
      );
      expect(Date.now() - at).toBeLessThan(5_000);
      expect(lost.error).toMatch(/^POD_DELETED: pod lf-doomed-d-[0-9a-f]{12} in namespace leoflow was deleted/);
      const t = await ended(runId);
      expect(t).toMatchObject({ state: 'success', try_number: 2 });
    },
  );

  it('deletes the pod of a cancelled attempt', { timeout: 60_000 }, async () => {
    const runId = await applyAndTrigger('dag_id: long\ntasks:\n  - id: l\n    command: ["sleep", "60"]\n');
    const t = await tiIn(runId, 'running', 20_000, 'running');
    const r = await cli(server.url, ['run', 'cancel', runId]);
    expect(r.code, r.stderr).toBe(0);
    await waitFor('the pod gone', async () => kube.pod(NS, podOf(t)) === undefined, 15_000);
    expect((await tiOf(runId)).state).toBe('cancelled');
  });

  it('ends an attempt past its timeout and removes its pod', { timeout: 60_000 }, async () => {
    const runId = await applyAndTrigger(
      'dag_id: slow\ntasks:\n  - id: s\n    command: ["sleep", "60"]\n    timeout: 2s\n',
    );
    const t = await ended(runId);
    expect(t.state).toBe('failed');
    expect(t.error).toMatch(/timed out/);
    await waitFor('the pod gone', async () => kube.pod(NS, podOf(t)) === undefined, 15_000);
  });

  it('counts pods created, create errors by reason and pod start latency', async () => {
    // Before the restart below: the counters are this server's.
    const m = await scrapeMetrics(server.metricsUrl);
    expect(metricSum(m, 'leoflow_kubernetes_pods_created_total')).toBeGreaterThan(0);
    expect(m.get('leoflow_kubernetes_pod_create_errors_total{reason="TooManyRequests"}')).toBeGreaterThanOrEqual(1);
    expect(metricSum(m, 'leoflow_kubernetes_pod_start_latency_seconds_count')).toBeGreaterThan(0);
  });

  it(
    'after a SIGKILL, the next server adopts the running pod: the run finishes with one pod',
    { timeout: 90_000 },
    async () => {
      const runId = await applyAndTrigger(
        'dag_id: survive\ntasks:\n  - id: s\n    command: ["sh", "-c", "sleep 4; echo survived"]\n',
      );
      const t = await tiIn(runId, 'running', 20_000, 'running');
      await server.kill();
      server = await startPro();
      const done = await ended(runId, 60_000);
      expect(done).toMatchObject({ state: 'success', try_number: 1 });
      expect(kube.createCount(NS, podOf(t))).toBe(1);
    },
  );

  it(
    "gives a pod's agent only the attempt whose token it carries: a late pod never claims a task instance",
    { timeout: 60_000 },
    async () => {
      // A task waiting for an agent that does not exist: scheduled, no attempt.
      const runId = await applyAndTrigger(
        'dag_id: waits\ntasks:\n  - id: w\n    command: ["true"]\n    executor: agents\n    placement: { labels: { nowhere: "yes" } }\n',
      );
      const t = await tiIn(runId, 'scheduled', 20_000, 'scheduled');
      const once = (env: Record<string, string>, extra: string[] = []) =>
        runCommand(
          process.execPath,
          [
            BIN,
            'agent',
            '--once',
            '--ti',
            t.id,
            '--server',
            server.url,
            '--id',
            `late-${env.LEOFLOW_ATTEMPT_TOKEN ? 'pod' : 'agent'}`,
            '--state-dir',
            path.join(tmp, 'late'),
            ...extra,
          ],
          { env, timeoutMs: 30_000 },
        );
      const late = await once({ LEOFLOW_ATTEMPT_TOKEN: randomUUID() });
      expect(late.code, late.stderr).toBe(0);
      expect(await tiOf(runId)).toMatchObject({ state: 'scheduled', try_number: 0 });
      // Without a token (a one-shot agent of the fleet) that placement would choose (it has the
      // task's labels), the same Hello claims it: the difference is the token.
      const claimer = await once({}, ['--labels', 'nowhere=yes']);
      expect(claimer.code, claimer.stderr).toBe(0);
      expect((await tiOf(runId)).try_number).toBe(1);
    },
  );

  it(
    'gives a task its Kubernetes Secret by secretKeyRef: the value reaches the task, never the pod spec, the API or the logs',
    { timeout: 60_000 },
    async () => {
      const value = `kube-secret-${randomUUID()}`;
      kube.setSecret(NS, 'task-secret', { token: value });
      const out = path.join(tmp, 'kube-secret.out');
      const runId = await applyAndTrigger(
        `dag_id: kubesecret\ntasks:\n  - id: k\n    command: ["sh", "-c", "printf %s \\"$TOKEN\\" > ${out}; echo wrote it; sleep 2"]\n    env:\n      TOKEN: { secret: { kubernetes: { name: task-secret, key: token } } }\n`,
      );
      const running = await tiIn(runId, 'running', 30_000, 'running');
      const posted = kube.pod(NS, podOf(running));
      const t = await ended(runId);
      expect(t.state, t.error ?? '').toBe('success');
      expect(await readFile(out, 'utf8')).toBe(value);
      expect(posted.spec.containers[0].env).toContainEqual({
        name: 'TOKEN',
        valueFrom: { secretKeyRef: { name: 'task-secret', key: 'token' } },
      });
      expect(JSON.stringify(posted)).not.toContain(value);
      const show = await cli(server.url, ['dag', 'show', 'kubesecret']);
      expect(show.stdout).toContain('  TOKEN=<secret: kubernetes task-secret/token>\n');
      const lines = await db.sql<{ line: string }[]>`select line from task_logs where ti_id = ${t.id}`;
      expect(lines.map((l) => l.line)).toContain('wrote it');
      expect(JSON.stringify(lines) + JSON.stringify(server.logs) + server.stderr()).not.toContain(value);
    },
  );

  it(
    "fails an attempt whose Kubernetes Secret is missing at once, with the pod's reason naming the Secret",
    { timeout: 60_000 },
    async () => {
      const runId = await applyAndTrigger(
        'dag_id: nosecret\ntasks:\n  - id: n\n    command: ["true"]\n    env:\n      TOKEN: { secret: { kubernetes: { name: absent-secret, key: token } } }\n',
      );
      const t = await ended(runId);
      expect(t.state).toBe('failed');
      expect(t.error).toBe('POD_CANNOT_START:CreateContainerConfigError:secret "absent-secret" not found');
    },
  );

  it(
    'gives pods the agent token from a Secret, never in their spec, when --pod-agent-token-secret names one',
    { timeout: 90_000 },
    async () => {
      const token = randomUUID();
      kube.setSecret(NS, 'leoflow-agent', { 'agent-token': token });
      await restartPro(['--agent-token', token, '--pod-agent-token-secret', 'leoflow-agent']);
      const runId = await applyAndTrigger('dag_id: tokened\ntasks:\n  - id: t\n    command: ["sleep", "2"]\n');
      const t = await tiIn(runId, 'running', 30_000, 'running: its agent got in with the token');
      const pod = kube.pod(NS, podOf(t));
      expect(pod.spec.containers[0].env).toContainEqual({
        name: 'LEOFLOW_AGENT_TOKEN',
        valueFrom: { secretKeyRef: { name: 'leoflow-agent', key: 'agent-token' } },
      });
      expect(JSON.stringify(pod)).not.toContain(token);
      expect((await ended(runId)).state).toBe('success');
    },
  );

  it(
    "never writes the shared --agent-token into a pod spec without a Secret: the pod gets in with its attempt's token (issue 38)",
    { timeout: 90_000 },
    async () => {
      const token = randomUUID();
      await restartPro(['--agent-token', token]);
      const runId = await applyAndTrigger('dag_id: plain\ntasks:\n  - id: t\n    command: ["sleep", "1"]\n');
      const t = await tiIn(runId, 'running', 30_000, 'running: its agent got in');
      const pod = kube.pod(NS, podOf(t));
      expect(JSON.stringify(pod)).not.toContain(token);
      expect(pod.spec.containers[0].env.map((e: { name: string }) => e.name)).not.toContain('LEOFLOW_AGENT_TOKEN');
      expect((await ended(runId)).state).toBe('success');
    },
  );

  it(
    "with auth on, a pod's agent gets in with its attempt's token alone, and a Hello with a wrong one is refused",
    { timeout: 90_000 },
    async () => {
      const admin = `lf_${randomUUID()}${randomUUID()}`;
      // Auth on (no --insecure), no agent credential at all: only the attempt's token in the pod.
      await restartPro(['--bootstrap-admin-token', admin], {
        LEOFLOW_INSECURE: undefined,
        LEOFLOW_AGENT_TOKEN: undefined,
      });
      process.env.LEOFLOW_TOKEN = admin;
      try {
        const runId = await applyAndTrigger('dag_id: authed\ntasks:\n  - id: t\n    command: ["sleep", "1"]\n');
        const t = await tiIn(runId, 'running', 30_000, "running: its pod's agent got in");
        const pod = kube.pod(NS, podOf(t));
        expect(pod.spec.containers[0].env.map((e: { name: string }) => e.name)).toEqual(['LEOFLOW_ATTEMPT_TOKEN']);
        // Another process claiming that pod's name with a made-up attempt token is refused at Hello.
        const r = await runCommand(
          process.execPath,
          [
            BIN,
            '--server',
            server.url,
            'agent',
            '--once',
            '--ti',
            t.id,
            '--id',
            podOf(t),
            '--log-format',
            'json',
            '--state-dir',
            path.join(tmp, 'impostor'),
          ],
          {
            env: { LEOFLOW_ATTEMPT_TOKEN: randomUUID(), LEOFLOW_AGENT_TOKEN: undefined, LEOFLOW_TOKEN: undefined },
            timeoutMs: 30_000,
          },
        );
        expect(r.code).not.toBe(0);
        expect(r.stdout + r.stderr).toContain('UNAUTHENTICATED');
        expect((await ended(runId)).state).toBe('success');
      } finally {
        delete process.env.LEOFLOW_TOKEN;
      }
    },
  );
});
