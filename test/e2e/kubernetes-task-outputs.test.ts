import { describe, expect, it } from 'vitest';
import { applyDag, expectRunSucceeds, triggerByCli } from '../helpers/applied-dag.js';
import { proServerForFile } from '../helpers/fake-kube/pro-server-for-file.js';
import { cli } from '../helpers/leoflow-process.js';
import { sh } from '../helpers/map-dag.js';

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
    await applyDag(f.server.url, f.tmp, [
      'dag_id: kube_outs',
      'tasks:',
      '  - id: a',
      `    command: ${JSON.stringify(sh(A))}`,
      '    output: required',
      '  - id: b',
      '    depends_on: [a]',
      '    inputs: { N: a.n }',
      `    command: ${JSON.stringify(sh(B))}`,
    ]);
    const runId = await triggerByCli(f.server.url, 'kube_outs');
    await expectRunSucceeds(f.db.sql, runId, 60_000);
    const out = await cli(f.server.url, ['run', 'output', runId, 'b']);
    expect(out.code, out.stderr).toBe(0);
    expect(JSON.parse(out.stdout)).toEqual({ double: 40, inputs: { a: { n: 20, s: 'a $(b) c' } } });
  });
});
