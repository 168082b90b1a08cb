import { existsSync } from 'node:fs';
import { readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { applyDag } from '../helpers/applied-dag.js';
import { runEnds } from '../helpers/run-ends.js';
import { agentsOfEachTest, serverForFile } from '../helpers/server-fixture.js';
import { writeTaskScript } from '../helpers/task-script.js';

/**
 * Outputs and inputs through a standalone agent (`leoflow agent`): the agent reads LEOFLOW_OUTPUT
 * and sends it in Finished; the control plane stores it with the end and sends the downstream's
 * inputs in its Assign; the agent writes them to the file named by LEOFLOW_INPUTS.
 */
const f = serverForFile({ tmpPrefix: 'leoflow-agent-outputs-', args: ['--max-output-size', '1KiB'] });
const agents = agentsOfEachTest(f);

const TRICKY = `quote " and $(touch PWNED) and \`touch PWNED2\`\nsecond line`;

const script = (name: string, body: string) => writeTaskScript(f.tmp, name, body);

describe('task outputs through an agent', () => {
  it(
    'stores a task output sent in Finished and gives it to the downstream task as inputs',
    { timeout: 60_000 },
    async () => {
      const value = { msg: TRICKY, n: 41 };
      await writeFile(path.join(f.tmp, 'value.json'), JSON.stringify(value));
      const a = await script('a.sh', `cp "${path.join(f.tmp, 'value.json')}" "$LEOFLOW_OUTPUT"`);
      const b = await script(
        'b.sh',
        [
          `cd "${f.tmp}"`,
          'cp "$LEOFLOW_INPUTS" agent-inputs.json',
          `printf '%s' "$MSG" > agent-msg.txt`,
          `printf '{"answer": %d}' $((N + 1)) > "$LEOFLOW_OUTPUT"`,
        ].join('\n'),
      );
      await applyDag(f.server.url, f.tmp, [
        'dag_id: agent_outs',
        'tasks:',
        '  - id: a',
        '    executor: agents',
        `    command: ["${a}"]`,
        '    output: required',
        '  - id: b',
        '    executor: agents',
        `    command: ["${b}"]`,
        '    depends_on: [a]',
        '    inputs: { MSG: a.msg, N: a.n }',
        '  - id: big',
        '    executor: agents',
        `    command: ["sh", "-c", "head -c 2000 /dev/zero | tr '\\\\0' 1 > $LEOFLOW_OUTPUT"]`,
        '  - id: silent',
        '    executor: agents',
        '    command: ["true"]',
        '    output: required',
        '  - id: quiet',
        '    executor: agents',
        '    command: ["true"]',
        '  - id: reader',
        '    executor: agents',
        '    command: ["true"]',
        '    depends_on: [quiet]',
        '    inputs: { V: quiet.v }',
      ]);
      await agents.connect('outputs-agent');
      const runId = (await f.api.workflow.triggerRun({ dagId: 'agent_outs' })).run!.runId;
      expect(await runEnds(f.db.sql, runId, { timeoutMs: 40_000 })).toBe('failed');
      const rows = await f.db.sql<{ task_id: string; state: string; error: string | null }[]>`
      select task_id, state, error from task_instances where run_id = ${runId} order by task_id`;
      const by = Object.fromEntries(rows.map((r) => [r.task_id, r]));
      expect(by.a!.state).toBe('success');
      expect(by.b!.state).toBe('success');
      expect(by.big!.state).toBe('failed');
      // The agent applied the limit the control plane sent (--max-output-size 1KiB).
      expect(by.big!.error).toBe(
        'output of task "big" is too big: 2.0 KiB (2000 bytes), the limit is 1 KiB (1024 bytes) (--max-output-size); nothing stored',
      );
      expect(by.silent!.state).toBe('failed');
      expect(by.silent!.error).toMatch(/^task "silent" wrote no output/);
      // A missing input, sent in the Assign: the agent starts nothing and says why.
      expect(by.reader!.state).toBe('failed');
      expect(by.reader!.error).toBe('input V of task "reader" (quiet.v): upstream task "quiet" wrote no output');
      expect(JSON.parse(await readFile(path.join(f.tmp, 'agent-inputs.json'), 'utf8'))).toEqual({ a: value });
      expect(await readFile(path.join(f.tmp, 'agent-msg.txt'), 'utf8')).toBe(TRICKY);
      expect(existsSync(path.join(f.tmp, 'PWNED')) || existsSync(path.join(f.tmp, 'PWNED2'))).toBe(false);
      const out = await f.api.workflow.getTaskOutput({ runId, taskId: 'b' });
      expect(out.outputs.map((o) => [o.tryNumber, JSON.parse(o.json)])).toEqual([[1, { answer: 42 }]]);
      const none = await f.api.workflow.getTaskOutput({ runId, taskId: 'big' });
      expect(none.outputs).toEqual([]);
    },
  );
});
