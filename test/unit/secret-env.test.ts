import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { create } from '@bufbuild/protobuf';
import { afterAll, describe, expect, it } from 'vitest';

import { attemptFromAssign } from '../../src/agent/attempt-messages.js';
import { attemptOf } from '../../src/core/attempt-env.js';
import type { Attempt } from '../../src/core/attempt.js';
import { defaultExecutorIssues } from '../../src/core/dag/check-secret-executor.js';
import { parseDag } from '../../src/core/dag/parse-dag.js';
import {
  MAX_SECRET_FILE_BYTES,
  secretEnvFromWire,
  secretEnvToWire,
  type SecretSource,
} from '../../src/core/secret-ref.js';
import { podManifest } from '../../src/executors/kubernetes/pod-manifest.js';
import { resolveSecretEnv } from '../../src/executors/process/resolve-secret-env.js';
import { AssignSchema } from '../../src/gen/leoflow/v1/agent_pb.js';
import { issuesOf } from '../helpers/dag-sources.js';

const FILE = 'dags/secret.yaml';

function dag(env: string, extra = ''): string {
  return `dag_id: s\ntasks:\n  - id: a\n    command: [env]\n${extra}    env:\n${env
    .split('\n')
    .filter(Boolean)
    .map((l) => `      ${l}\n`)
    .join('')}`;
}

describe('secret env entries in a DAG file', () => {
  it('keeps plain values in env and each secret as its reference in secretEnv', () => {
    const spec = parseDag(
      dag(
        `PLAIN: hello
DB_PASSWORD: { secret: { env: PG_PASS } }
API_KEY: { secret: { file: /run/secrets/api-key } }
TOKEN: { secret: { kubernetes: { name: my-secret, key: token.txt } } }`,
        '    executor: kubernetes\n',
      ),
      FILE,
    );
    const t = spec.tasks[0]!;
    expect(t.env).toEqual({ PLAIN: 'hello' });
    expect(t.secretEnv).toEqual({
      DB_PASSWORD: { env: 'PG_PASS' },
      API_KEY: { file: '/run/secrets/api-key' },
      TOKEN: { kubernetes: { name: 'my-secret', key: 'token.txt' } },
    });
  });

  it('leaves secretEnv out of a task without secrets (an unchanged file keeps its hash and version)', () => {
    const t = parseDag(dag('PLAIN: hello'), FILE).tasks[0]!;
    expect(Object.hasOwn(t, 'secretEnv')).toBe(false);
  });

  it.each([
    [
      'X: { secret: {} }',
      'tasks[0].env.X.secret',
      'expected a mapping with exactly one of env, file, kubernetes, got an empty mapping',
    ],
    [
      'X: { secret: { env: A, file: /b } }',
      'tasks[0].env.X.secret',
      'expected exactly one of env, file, kubernetes, got env and file',
    ],
    ['X: { secret: { vault: a } }', 'tasks[0].env.X.secret.vault', 'unknown key "vault"'],
    ['X: { secrte: { env: A } }', 'tasks[0].env.X.secrte', 'unknown key "secrte" (did you mean "secret"?)'],
    ['X: { value: a }', 'tasks[0].env.X.value', 'unknown key "value"'],
    ['X: { secret: { env: 1A } }', 'tasks[0].env.X.secret.env', 'expected an environment variable name'],
    ['X: { secret: { env: "" } }', 'tasks[0].env.X.secret.env', 'expected a non-empty string'],
    ['X: { secret: { file: run/secrets/x } }', 'tasks[0].env.X.secret.file', 'expected an absolute path'],
    [
      'X: { secret: "hunter2" }',
      'tasks[0].env.X.secret',
      'expected a mapping with exactly one of env, file, kubernetes',
    ],
    [
      'X: { secret: { kubernetes: { name: My_Secret, key: k } } }',
      'tasks[0].env.X.secret.kubernetes.name',
      "a Secret's name must be a DNS-1123 subdomain",
    ],
    [
      'X: { secret: { kubernetes: { name: s, key: "a/b" } } }',
      'tasks[0].env.X.secret.kubernetes.key',
      'expected a Secret key of at most 253 letters',
    ],
    [
      'X: { secret: { kubernetes: { name: s } } }',
      'tasks[0].env.X.secret.kubernetes.key',
      'missing required key "key"',
    ],
    [
      'LEOFLOW_AGENT_TOKEN: { secret: { env: A } }',
      'tasks[0].env.LEOFLOW_AGENT_TOKEN',
      "names starting with LEOFLOW_ are Leoflow's own",
    ],
    ['1X: { secret: { env: A } }', 'tasks[0].env["1X"]', 'invalid environment variable name "1X"'],
  ])('refuses %s with the path and what is wrong', (entry, path, message) => {
    const issues = issuesOf(dag(entry, '    executor: kubernetes\n'));
    expect(issues).toHaveLength(1);
    expect(issues[0]!.path).toBe(path);
    expect(issues[0]!.message).toContain(message);
  });

  it('reports every bad entry at once', () => {
    expect(issuesOf(dag('A: { secret: {} }\nB: { secret: { file: x } }\nC: 3'))).toHaveLength(3);
  });

  it.each(['subprocess', 'agents'])('refuses a Kubernetes Secret on a task whose executor is %s', (executor) => {
    const issues = issuesOf(
      dag('TOKEN: { secret: { kubernetes: { name: s, key: k } } }', `    executor: ${executor}\n`),
    );
    expect(issues).toEqual([
      {
        path: 'tasks[0].env.TOKEN.secret.kubernetes',
        message: `a Kubernetes Secret (kubernetes s/k) is only given to pods: it needs executor: kubernetes, and this task's executor is ${executor}`,
      },
    ]);
  });

  it('reports a Kubernetes Secret off the kubernetes executor beside the other bad entries', () => {
    const issues = issuesOf(
      dag('T: { secret: { kubernetes: { name: s, key: k } } }\nB: { secret: { file: rel } }', '    executor: agents\n'),
    );
    expect(issues.map((i) => i.path)).toEqual(['tasks[0].env.B.secret.file', 'tasks[0].env.T.secret.kubernetes']);
  });

  it('checks a task on the default executor once the server knows its default', () => {
    const spec = parseDag(
      dag('TOKEN: { secret: { kubernetes: { name: s, key: k } } }\nA: { secret: { env: A } }'),
      FILE,
    );
    expect(defaultExecutorIssues(spec, 'kubernetes')).toEqual([]);
    expect(defaultExecutorIssues(spec, 'subprocess')).toEqual([
      {
        path: 'tasks[0].env.TOKEN.secret.kubernetes',
        message:
          "a Kubernetes Secret (kubernetes s/k) is only given to pods: it needs executor: kubernetes, and this task's executor is subprocess (the server's default)",
      },
    ]);
  });
});

describe('resolving secrets where the task starts', () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'leoflow-secret-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('reads an environment variable, a whole file (its bytes as they are) and a pod-given variable', () => {
    const file = path.join(dir, 'key');
    writeFileSync(file, 'file-value\n');
    const r = resolveSecretEnv(
      { A: { env: 'SRC' }, B: { file }, C: { kubernetes: { name: 's', key: 'k' } } },
      { SRC: 'env-value', C: 'pod-value' },
    );
    expect(r).toEqual({ ok: true, env: { A: 'env-value', B: 'file-value\n', C: 'pod-value' } });
  });

  it('names the variable and where it looked, never a value, when one is missing', () => {
    const r = resolveSecretEnv({ OK: { env: 'SET' }, DB_PASSWORD: { env: 'PG_PASS' } }, { SET: 'sekrit-value' });
    expect(r.ok).toBe(false);
    const error = (r as { error: string }).error;
    expect(error).toMatch(
      /^secret DB_PASSWORD \(env PG_PASS\): environment variable PG_PASS is not set where the task starts \(host .+, pid \d+\)$/,
    );
    expect(error).not.toContain('sekrit-value');
  });

  it('refuses a missing file, a folder, a file over the limit and a value with a NUL byte, by name', () => {
    const big = path.join(dir, 'big');
    writeFileSync(big, Buffer.alloc(MAX_SECRET_FILE_BYTES + 1, 'x'));
    const nul = path.join(dir, 'nul');
    writeFileSync(nul, 'a\0b');
    const err = (refs: Record<string, SecretSource>) => {
      const r = resolveSecretEnv(refs, {});
      return r.ok ? 'resolved' : r.error;
    };
    expect(err({ K: { file: path.join(dir, 'absent') } })).toBe(
      `secret K (file ${path.join(dir, 'absent')}): cannot read ${path.join(dir, 'absent')}: ENOENT`,
    );
    expect(err({ K: { file: dir } })).toBe(`secret K (file ${dir}): ${dir} is not a regular file`);
    expect(err({ K: { file: big } })).toBe(
      `secret K (file ${big}): ${big} holds ${MAX_SECRET_FILE_BYTES + 1} bytes, more than the limit of ${MAX_SECRET_FILE_BYTES}`,
    );
    expect(err({ K: { file: nul } })).toBe(
      `secret K (file ${nul}): the value holds a NUL byte, which no process environment can carry`,
    );
    expect(err({ T: { kubernetes: { name: 's', key: 'k' } } })).toMatch(
      /^secret T \(kubernetes s\/k\): a Kubernetes Secret is given only to a pod of the kubernetes executor, and T is not set here/,
    );
  });
});

const attempt: Attempt = {
  tiId: '7',
  runId: '3',
  dagId: 's',
  taskId: 'a',
  tryNumber: 1,
  maxTries: 1,
  attemptToken: '0b9c2c39-4f1e-4a51-9b7e-3d2f0c9a1e11',
  dispatchKey: 's-3-a-1',
  command: ['env'],
  env: { PLAIN: 'p' },
  cwd: null,
  timeoutMs: null,
  secretEnv: {
    A: { env: 'SRC' },
    B: { file: '/run/secrets/b' },
    T: { kubernetes: { name: 'my-secret', key: 'token' } },
  },
};

describe('secret references on their way to the executor', () => {
  it("carries the task's references into the attempt, never resolved", () => {
    const spec = parseDag(dag('PLAIN: p\nA: { secret: { env: SRC } }'), FILE);
    const a = attemptOf(
      {
        tiId: '7',
        runId: '3',
        dagId: 's',
        taskId: 'a',
        logicalDate: new Date(0),
        conf: {},
        task: spec.tasks[0]!,
      } as never,
      { tryNumber: 1, maxTries: 1, attemptToken: attempt.attemptToken, dispatchKey: 's-3-a-1' } as never,
      'test-install',
    );
    expect(a.secretEnv).toEqual({ A: { env: 'SRC' } });
    expect(a.env.PLAIN).toBe('p');
    expect(Object.hasOwn(a.env, 'A')).toBe(false);
  });

  it('sends references in Assign and reads them back on the agent unchanged', () => {
    const msg = create(AssignSchema, {
      attempt: { tiId: attempt.tiId, tryNumber: 1, attemptToken: attempt.attemptToken },
      dagId: 's',
      runId: '3',
      taskId: 'a',
      maxTries: 1,
      command: ['env'],
      env: attempt.env,
      secretEnv: secretEnvToWire(attempt.secretEnv),
    });
    expect(attemptFromAssign(msg).secretEnv).toEqual(attempt.secretEnv);
    expect(attemptFromAssign(create(AssignSchema, { ...msg, secretEnv: {} })).secretEnv).toBeUndefined();
  });

  it('refuses a reference with no source, naming the variable', () => {
    expect(() => secretEnvFromWire({ X: { source: { case: undefined } } })).toThrow(
      'secret_env X: a SecretRef with no source (env, file or kubernetes)',
    );
  });

  it("gives a pod its Kubernetes Secrets as secretKeyRefs under the variable's name, and nothing else of the secrets", () => {
    const pod = podManifest(attempt, {
      install: 'install-a',
      namespace: 'ns',
      image: 'img',
      serverUrl: 'http://cp:1',
      agentCommand: ['leoflow'],
      killGraceMs: 1000,
    });
    const env = pod.spec!.containers[0]!.env!;
    expect(env.filter((e) => e.name === 'T')).toEqual([
      { name: 'T', valueFrom: { secretKeyRef: { name: 'my-secret', key: 'token' } } },
    ]);
    expect(env.map((e) => e.name)).not.toContain('A');
    expect(env.map((e) => e.name)).not.toContain('B');
  });
});
