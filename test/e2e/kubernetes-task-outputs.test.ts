import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { proServerForFile } from '../helpers/fake-kube/pro-server-for-file.js';
import { cli } from '../helpers/leoflow-process.js';
import { runEnds } from '../helpers/run-ends.js';

/**
 * Outputs and inputs on the kubernetes executor: each pod runs the real `leoflow agent --once`,
 * which reads the task's output and sends it in Finished; the downstream pod's agent gets the
 * inputs in its Assign (fake API server, as in kubernetes-executor.test.ts).
 */
const NS = 'leoflow';
const A = `printf '%s' '{"n": 20, "s": "a $(b) c"}' > "$LEOFLOW_OUTPUT"`;
const B = `printf '{"double": %d, "inputs": %s}' $((N * 2)) "$(cat "$LEOFLOW_INPUTS")" > "$LEOFLOW_OUTPUT"`;
const f = proServerForFile({ namespace: NS, args: ['--kill-grace', '2s'], tmpPrefix: 'leoflow-kube-outputs-' });

describe('task outputs on the kubernetes executor', () => {
  it("hands a pod's output to the next pod as inputs, and stores both", { timeout: 90_000 }, async () => {
    const file = path.join(f.tmp, 'kube-outs.yaml');
    await writeFile(
      file,
      [
        'dag_id: kube_outs',
        'tasks:',
        '  - id: a',
        `    command: ["sh", "-c", ${JSON.stringify(A)}]`,
        '    output: required',
        '  - id: b',
        '    depends_on: [a]',
        '    inputs: { N: a.n }',
        `    command: ["sh", "-c", ${JSON.stringify(B)}]`,
        '',
      ].join('\n'),
    );
    const applied = await cli(f.server.url, ['dag', 'apply', file]);
    expect(applied.code, applied.stderr + applied.stdout).toBe(0);
    const t = await cli(f.server.url, ['run', 'trigger', 'kube_outs', '-o', 'json']);
    expect(t.code, t.stderr).toBe(0);
    const runId = JSON.parse(t.stdout).run_id as string;
    const state = await runEnds(f.db.sql, runId, { timeoutMs: 60_000 });
    const tis = await f.db.sql`select task_id, state, error from task_instances where run_id = ${runId}`;
    expect(state, JSON.stringify(tis)).toBe('success');
    const out = await cli(f.server.url, ['run', 'output', runId, 'b']);
    expect(out.code, out.stderr).toBe(0);
    expect(JSON.parse(out.stdout)).toEqual({ double: 40, inputs: { a: { n: 20, s: 'a $(b) c' } } });
  });
});
