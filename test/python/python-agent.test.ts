import { randomBytes } from 'node:crypto';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startServer, waitFor, type ServerProcess } from '../helpers/leoflow-process.js';
import {
  generateStubs,
  killPythonProcesses,
  PY,
  PY_DIR,
  runPython,
  startPython,
  stopPython,
  type PythonProcess,
} from '../helpers/python-process.js';
import { createTestDatabase, type TestDatabase } from '../helpers/test-database.js';

/**
 * The agent protocol from another language: the Python agent in examples/python (grpcio, stubs
 * generated from proto/ by generate.sh) runs a DAG's tasks against the real `leoflow server`, and
 * trigger_and_wait.py drives WorkflowService from Python. Needs Debian's python3-grpcio,
 * python3-grpc-tools and protobuf-compiler (see .ci/run). Failover between replicas is in
 * python-agent-failover.test.ts.
 */

let tmp: string;
let stubs: string;
let db: TestDatabase;
let server: ServerProcess;
let target: string; // host:port of the server, for the Python side

const start = (args: string[], timeoutMs: number, env: Record<string, string> = {}): PythonProcess =>
  startPython(stubs, args, timeoutMs, env);
const run = (args: string[], timeoutMs?: number) => runPython(stubs, args, timeoutMs);

function startAgent(id: string, extra: string[] = [], env: Record<string, string> = {}): PythonProcess {
  return start(
    [
      `${PY_DIR}/leoflow_agent.py`,
      '--server',
      target,
      '--id',
      id,
      '--labels',
      'lang=python',
      '--slots',
      '2',
      '--kill-grace',
      '1',
      ...extra,
    ],
    90_000,
    env,
  );
}

interface RunJson {
  run: { state: string; run_id: string };
  task_instances: {
    task_id: string;
    state: string;
    agent_id?: string;
    exit_code?: number;
    error?: string;
    output_json?: string;
  }[];
}

/** Applies a DAG file with trigger_and_wait.py, triggers it and waits for the run's end. */
async function triggerAndWait(
  dagFile: string,
): Promise<{ code: number | null; stdout: string; stderr: string; result: RunJson }> {
  const out = path.join(tmp, `${path.basename(dagFile)}.json`);
  const r = await run(
    [`${PY_DIR}/trigger_and_wait.py`, '--server', target, '--timeout', '60', '--logs', '--json-out', out, dagFile],
    80_000,
  );
  let result: RunJson;
  try {
    result = JSON.parse(await readFile(out, 'utf8')) as RunJson;
  } catch {
    throw new Error(`trigger_and_wait.py wrote no result (exit ${r.code}):\n${r.stdout}\n${r.stderr}`);
  }
  return { ...r, result };
}

function agentTask(id: string, command: string[], more: Record<string, unknown> = {}): Record<string, unknown> {
  return { id, executor: 'agents', placement: { labels: { lang: 'python' } }, command, ...more };
}

/** Writes DAG `dagId` of these tasks as `dagId.json` in the scratch folder, for triggerAndWait. */
async function dagFile(dagId: string, tasks: Record<string, unknown>[]): Promise<string> {
  const file = path.join(tmp, `${dagId}.json`);
  await writeFile(file, JSON.stringify({ dag_id: dagId, tasks }));
  return file;
}

beforeAll(async () => {
  tmp = await mkdtemp(path.join(os.tmpdir(), 'leoflow-python-'));
  stubs = path.join(tmp, 'stubs');
  await generateStubs(stubs);
  db = await createTestDatabase();
  server = await startServer({ env: { DATABASE_URL: db.url } });
  target = new URL(server.url).host;
}, 90_000);

afterAll(async () => {
  await killPythonProcesses();
  await server?.stop();
  await db?.drop();
  if (tmp) await rm(tmp, { recursive: true, force: true });
});

/** A task in Python: reads its upstream's output from LEOFLOW_INPUTS, writes its own to LEOFLOW_OUTPUT. */
const PY_TASK = [
  'import json, os',
  "inputs = json.load(open(os.environ['LEOFLOW_INPUTS']))",
  "n = int(os.environ['LEOFLOW_TRY_NUMBER'])",
  "print('python-task try', n, 'got', inputs['a']['greeting'])",
  "json.dump({'echoed': inputs['a']['greeting'], 'try': n}, open(os.environ['LEOFLOW_OUTPUT'], 'w'))",
].join('\n');

describe('a Python agent over AgentService', () => {
  it('runs a DAG placed on it, reports output and exit codes, and exits after --max-tasks results', async () => {
    const agentId = `py-agent-${randomBytes(3).toString('hex')}`;
    // 3 tasks of the first DAG + 1 of the second: then the agent exits 0 by itself.
    const agent = startAgent(agentId, ['--max-tasks', '4']);
    try {
      await waitFor(
        'the Python agent to be welcomed',
        async () => agent.stderr.includes('welcomed by replica') || agent.child.exitCode !== null,
        30_000,
      ).catch((err: Error) => {
        throw new Error(`${err.message}; the agent said:\n${agent.stderr}`);
      });
      expect(agent.stderr, 'the agent was not welcomed').toContain('welcomed by replica');

      const okFile = await dagFile('py_ok', [
        agentTask('a', [
          'sh',
          '-c',
          'echo "hello-from-$LEOFLOW_TASK_ID"; echo to-stderr >&2; printf "bytes \\377 crlf\\r\\n"; ' +
            'echo \'{"greeting": "hi"}\' > "$LEOFLOW_OUTPUT"',
        ]),
        // A Python task reads its inputs and writes its output, as the example agent hands them over.
        agentTask('b', [PY, '-c', PY_TASK], { depends_on: ['a'] }),
        agentTask('c', ['sh', '-c', 'echo "$GREETING from c"'], {
          depends_on: ['a'],
          inputs: { GREETING: 'a.greeting' },
        }),
      ]);
      const ok = await triggerAndWait(okFile);
      expect(ok.code, `${ok.stdout}\n${ok.stderr}\nagent:\n${agent.stderr}`).toBe(0);
      expect(ok.result.run.state).toBe('RUN_STATE_SUCCESS');
      expect(ok.result.task_instances.map((t) => [t.task_id, t.state, t.agent_id, t.exit_code]).sort()).toEqual([
        ['a', 'TASK_STATE_SUCCESS', agentId, 0],
        ['b', 'TASK_STATE_SUCCESS', agentId, 0],
        ['c', 'TASK_STATE_SUCCESS', agentId, 0],
      ]);
      expect(ok.stdout).toMatch(/^\[a #1 stdout\] hello-from-a$/m);
      expect(ok.stdout).toMatch(/^\[a #1 stderr\] to-stderr$/m);
      // agent.proto's decoding rule: UTF-8 with U+FFFD for a bad byte, the \r before \n cut.
      expect(ok.stdout).toMatch(/^\[a #1 stdout\] bytes \uFFFD crlf$/m);
      expect(ok.stdout).toMatch(/^\[b #1 stdout\] python-task try 1 got hi$/m);
      // GetRun with_outputs, as trigger_and_wait.py asks at the end, carries each task's output.
      const b = ok.result.task_instances.find((t) => t.task_id === 'b');
      expect(JSON.parse(b?.output_json ?? 'null')).toEqual({ echoed: 'hi', try: 1 });
      expect(ok.stdout).toMatch(/^ {2}output of b: /m);
      expect(ok.stdout).toMatch(/^\[c #1 stdout\] hi from c$/m);
      expect(ok.stdout).toMatch(/^run \d+ success$/m);

      const failFile = await dagFile('py_fail', [
        agentTask('boom', ['sh', '-c', 'echo about to fail; exit 3'], { retries: 0 }),
      ]);
      const failed = await triggerAndWait(failFile);
      expect(failed.code, `${failed.stdout}\n${failed.stderr}`).toBe(1);
      expect(failed.result.run.state).toBe('RUN_STATE_FAILED');
      expect(failed.result.task_instances).toHaveLength(1);
      expect(failed.result.task_instances[0]).toMatchObject({
        task_id: 'boom',
        state: 'TASK_STATE_FAILED',
        agent_id: agentId,
        exit_code: 3,
      });
      expect(failed.stdout).toMatch(/^\[boom #1 stdout\] about to fail$/m);

      const code = await Promise.race([
        agent.exited,
        new Promise<'timeout'>((r) => setTimeout(() => r('timeout'), 20_000)),
      ]);
      expect(code, `the agent did not exit after 4 acknowledged results:\n${agent.stderr}`).toBe(0);
      expect(agent.stderr).toContain('done: 4 results acknowledged');
    } finally {
      await stopPython(agent);
    }
  });

  it('resolves secret variables on its own machine, and fails an attempt whose secret is missing by name', async () => {
    const value = `py-secret-${randomBytes(8).toString('hex')}`;
    const agent = startAgent(`py-secrets-${randomBytes(3).toString('hex')}`, [], { PY_AGENT_SECRET: value });
    try {
      await waitFor(
        'the Python agent to be welcomed',
        async () => agent.stderr.includes('welcomed by replica'),
        30_000,
      );
      const out = path.join(tmp, 'py-secret.out');
      const file = await dagFile('py_secrets', [
        agentTask('uses', ['sh', '-c', `printf %s "$TOKEN" > ${out}; echo wrote it`], {
          env: { TOKEN: { secret: { env: 'PY_AGENT_SECRET' } } },
        }),
        agentTask('lacks', ['sh', '-c', 'echo should not run'], {
          env: { NOPE: { secret: { env: 'PY_NOT_SET' } } },
        }),
      ]);
      const r = await triggerAndWait(file);
      expect(await readFile(out, 'utf8')).toBe(value);
      const byTask = Object.fromEntries(r.result.task_instances.map((t) => [t.task_id, t]));
      expect(byTask.uses!.state).toBe('TASK_STATE_SUCCESS');
      expect(byTask.lacks).toMatchObject({
        state: 'TASK_STATE_FAILED',
        error: 'secret NOPE (env PY_NOT_SET): environment variable PY_NOT_SET is not set where the task starts',
      });
      expect(r.stdout).not.toContain('should not run');
      expect(r.stdout + r.stderr + agent.stderr + agent.stdout + JSON.stringify(server.logs)).not.toContain(value);
    } finally {
      await stopPython(agent);
    }
  });

  it('a Hello refused with INVALID_ARGUMENT (a bad agent id) is fatal: it exits 2 instead of retrying', async () => {
    const agent = start(
      [`${PY_DIR}/leoflow_agent.py`, '--server', target, '--id', 'bad id', '--labels', 'lang=python'],
      30_000,
    );
    try {
      const code = await Promise.race([
        agent.exited,
        new Promise<'timeout'>((r) => setTimeout(() => r('timeout'), 20_000)),
      ]);
      expect(code, agent.stderr).toBe(2);
      expect(agent.stderr).toMatch(/refused by the control plane: hello\.agent_id: must be/);
    } finally {
      await stopPython(agent);
    }
  });

  it('an agent speaking protocol version 99 is refused with a clear error and exits 2', async () => {
    const agent = startAgent(`py-v99-${randomBytes(3).toString('hex')}`, ['--protocol-version', '99']);
    try {
      const code = await Promise.race([
        agent.exited,
        new Promise<'timeout'>((r) => setTimeout(() => r('timeout'), 20_000)),
      ]);
      expect(code, agent.stderr).toBe(2);
      expect(agent.stderr).toMatch(/refused by the control plane: .*protocol version 99/);
    } finally {
      await stopPython(agent);
    }
  });
});

describe('trigger_and_wait.py against a server with API tokens on', () => {
  let authDb: TestDatabase;
  let authed: ServerProcess;
  const admin = `lf_${randomBytes(32).toString('hex')}`;
  beforeAll(async () => {
    authDb = await createTestDatabase();
    // Pro with auth on (the helper's LEOFLOW_INSECURE unset), tasks run by the server itself.
    authed = await startServer({
      env: { DATABASE_URL: authDb.url, LEOFLOW_INSECURE: undefined, LEOFLOW_TOKEN: undefined },
      args: ['--edition', 'pro', '--executor', 'subprocess', '--bootstrap-admin-token', admin],
    });
  }, 60_000);
  afterAll(async () => {
    await authed?.stop();
    await authDb?.drop();
  });

  it('sends LEOFLOW_TOKEN as a bearer token: refused without it (UNAUTHENTICATED), runs with it', async () => {
    const file = path.join(tmp, 'authed.yaml');
    await writeFile(file, 'dag_id: py_authed\ntasks:\n  - id: hi\n    command: [echo, hello with a token]\n');
    const host = new URL(authed.url).host;
    const args = [`${PY_DIR}/trigger_and_wait.py`, '--server', host, '--timeout', '60', '--logs', file];
    const without = await runPython(stubs, args, 60_000, { LEOFLOW_TOKEN: '' });
    expect(without.code).toBe(1);
    expect(without.stderr).toMatch(/^trigger_and_wait: UNAUTHENTICATED: /m);
    const wrong = await runPython(stubs, args, 60_000, { LEOFLOW_TOKEN: `lf_${randomBytes(32).toString('hex')}` });
    expect(wrong.code).toBe(1);
    expect(wrong.stderr).toMatch(/^trigger_and_wait: UNAUTHENTICATED: /m);
    const ok = await runPython(stubs, args, 60_000, { LEOFLOW_TOKEN: admin });
    expect(ok.stderr).toBe('');
    expect(ok.code).toBe(0);
    expect(ok.stdout).toContain('[hi #1 stdout] hello with a token');
    expect(ok.stdout).toMatch(/run \d+ success/);
  });
});
