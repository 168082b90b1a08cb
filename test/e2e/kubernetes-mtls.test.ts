import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LABEL } from '../../src/core/pod-identity.js';
import { startFakeKubeApi, type FakeKubeApi } from '../helpers/fake-kube/index.js';
import { freePort } from '../helpers/global-setup.js';
import { BIN, cli, runCommand, startServer, waitFor, type ServerProcess } from '../helpers/leoflow-process.js';
import { makeTestPki, type TestPki } from '../helpers/test-certs.js';
import { helloOverTls } from '../helpers/hello-over-tls.js';
import { createTestDatabase, type TestDatabase } from '../helpers/test-database.js';
import { proServerArgs } from '../helpers/fake-kube/pro-server-args.js';

/**
 * mTLS with the kubernetes executor (issue 25): a pod's one-shot agent has no client certificate
 * of its pod's name, so it proves itself with its attempt's token instead, for that pod's agent id
 * only. Every other agent still needs its certificate.
 */

const NS = 'leoflow';
let pki: TestPki;
let db: TestDatabase;
let kube: FakeKubeApi;
let tmp: string;
let server: ServerProcess;
let url: string;

beforeAll(async () => {
  pki = makeTestPki();
  db = await createTestDatabase();
  // The pods' image trusts the control plane's CA (what --pod-ca mounts in a real cluster; the
  // fake kubelet mounts no volumes, so its processes get the file by the environment).
  kube = await startFakeKubeApi({
    namespaces: [NS],
    baseEnv: { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: process.env.HOME ?? '/', LEOFLOW_CA_FILE: pki.ca },
  });
  tmp = await mkdtemp(path.join(os.tmpdir(), 'leoflow-kube-mtls-'));
  const port = await freePort();
  url = `https://127.0.0.1:${port}`;
  // --insecure (the helper's default): the attempt's token is still required of a pod under mTLS.
  server = await startServer({
    env: { DATABASE_URL: db.url },
    args: [
      ...proServerArgs({ port, kube, namespace: NS, podServerUrl: url }),
      '--tls-cert',
      pki.server.cert,
      '--tls-key',
      pki.server.key,
      '--tls-client-ca',
      pki.ca,
    ],
  });
}, 60_000);

afterAll(async () => {
  await server?.stop();
  await kube?.close();
  await db?.drop();
  pki?.remove();
  if (tmp) await rm(tmp, { recursive: true, force: true });
});

describe('mTLS and the pods of the kubernetes executor', () => {
  it(
    "a pod's agent gets in with its attempt's token; a wrong token, another agent id, or an agent without a certificate is refused",
    { timeout: 90_000 },
    async () => {
      const file = path.join(tmp, 'pod.yaml');
      await writeFile(
        file,
        'dag_id: podmtls\ntasks:\n  - id: t\n    command: ["sh", "-c", "sleep 3; echo from-the-pod"]\n',
      );
      const applied = await cli(url, ['--ca-file', pki.ca, 'dag', 'apply', file]);
      expect(applied.code, applied.stderr).toBe(0);
      const trig = await cli(url, ['--ca-file', pki.ca, 'run', 'trigger', 'podmtls', '--output', 'json']);
      expect(trig.code, trig.stderr).toBe(0);
      const runId = String((JSON.parse(trig.stdout) as { run_id: string }).run_id);
      const ti = await waitFor(
        "running: the pod's agent got in without a certificate",
        async () => {
          const [x] = await db.sql<
            { id: string; state: string; try_number: number; attempt_token: string; error: string | null }[]
          >`
        select id, state, try_number, attempt_token::text, error from task_instances where run_id = ${runId}`;
          if (x?.state === 'failed') throw new Error(`the attempt failed: ${x.error}`);
          return x?.state === 'running' ? x : null;
        },
        30_000,
      );
      const pod = kube.postedPodName({ [LABEL.ti]: ti.id, [LABEL.try]: String(ti.try_number) })!;
      const [agent] = await db.sql<{ agent_id: string }[]>`select agent_id from task_instances where id = ${ti.id}`;
      expect(agent!.agent_id).toBe(pod);

      const ca = readFileSync(pki.ca);
      const noCert = { ca, cert: null, key: null };
      // The pod's name with a made-up attempt token.
      const wrongToken = await helloOverTls(url, pod, noCert, { only: { tiId: ti.id, attemptToken: randomUUID() } });
      expect(wrongToken.err).toEqual({
        code: 16,
        details: `hello.only_attempt_token: no live kubernetes attempt of task instance ${ti.id} with this token runs in a pod named "${pod}"`,
      });
      // The right attempt token, claimed by another agent id.
      const otherId = await helloOverTls(url, 'not-the-pod', noCert, {
        only: { tiId: ti.id, attemptToken: ti.attempt_token },
      });
      expect(otherId.err).toEqual({
        code: 16,
        details: `hello.only_attempt_token: no live kubernetes attempt of task instance ${ti.id} with this token runs in a pod named "not-the-pod"`,
      });
      // An ordinary agent (no attempt token) without a certificate.
      const ordinary = await helloOverTls(url, 'plain-agent', noCert);
      expect(ordinary.err).toEqual({
        code: 16,
        details:
          'agent "plain-agent" presented no TLS client certificate; this control plane requires one signed by its --tls-client-ca for agent streams',
      });
      // The real agent binary, as an impostor of the pod: refused, and the pod's attempt goes on.
      const r = await runCommand(
        process.execPath,
        [
          BIN,
          '--server',
          url,
          '--ca-file',
          pki.ca,
          'agent',
          '--once',
          '--ti',
          ti.id,
          '--id',
          pod,
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

      const end = await waitFor(
        `run ${runId} over`,
        async () => {
          const [x] = await db.sql<{ state: string }[]>`select state from dag_runs where id = ${runId}`;
          return x && ['success', 'failed'].includes(x.state) ? x.state : null;
        },
        30_000,
      );
      expect(end).toBe('success');
      const lines = await db.sql<
        { line: string }[]
      >`select line from task_logs where ti_id = ${ti.id} and stream = 'stdout'`;
      expect(lines.map((l) => l.line)).toContain('from-the-pod');
      // No warning at start that pods would be refused.
      expect(server.logs.some((l) => /pods' agents present no client certificate/.test(String(l.msg)))).toBe(false);
    },
  );
});
