import { existsSync } from 'node:fs';
import { readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { cli } from '../helpers/leoflow-process.js';
import { runEnds } from '../helpers/run-ends.js';
import { replicasForFile } from '../helpers/server-fixture.js';

/**
 * Outputs and inputs on a Lite server (subprocess executor, shipped defaults): a task writes JSON to
 * LEOFLOW_OUTPUT; its downstream reads it from LEOFLOW_INPUTS and from a variable of `inputs:`.
 */
const f = replicasForFile({ tmpPrefix: 'leoflow-outputs-' });
const start = f.launcher([]);

/** A value with quotes, a command substitution and newlines: it must arrive as data, and run nothing. */
const TRICKY = `he said "hi" $(touch ${'PWNED'}) \`touch PWNED2\`; 'x'\nline two\n`;

async function script(name: string, body: string): Promise<string> {
  const file = path.join(f.tmp, name);
  await writeFile(file, `#!/bin/sh\nset -e\n${body}\n`, { mode: 0o755 });
  return file;
}

async function tis(runId: string) {
  const rows = await f.db.sql<{ task_id: string; state: string; error: string | null }[]>`
    select task_id, state, error from task_instances where run_id = ${runId} order by task_id`;
  return Object.fromEntries(rows.map((r) => [r.task_id, r]));
}

describe('task outputs and inputs on the subprocess executor', () => {
  it('hands a task its upstream outputs as a file and variables, byte for byte, and keeps every try', async () => {
    const server = await start();
    const value = { msg: TRICKY, n: 3, nested: { list: [1, 'two'] } };
    await writeFile(path.join(f.tmp, 'value.json'), JSON.stringify(value));
    const a = await script('a.sh', `cp "${path.join(f.tmp, 'value.json')}" "$LEOFLOW_OUTPUT"`);
    const b = await script(
      'b.sh',
      [
        `cd "${f.tmp}"`,
        `cp "$LEOFLOW_INPUTS" inputs-seen.json`,
        `printf '%s' "$MSG" > msg-seen.txt`,
        `printf '%s' "$SECOND" > second-seen.txt`,
        `printf '{"sum": %d}' $((N + 1)) > "$LEOFLOW_OUTPUT"`,
      ].join('\n'),
    );
    const flaky = await script(
      'flaky.sh',
      `printf '{"try": %s}' "$LEOFLOW_TRY_NUMBER" > "$LEOFLOW_OUTPUT"\n[ "$LEOFLOW_TRY_NUMBER" -ge 2 ]`,
    );
    const file = path.join(f.tmp, 'outs.yaml');
    await writeFile(
      file,
      [
        'dag_id: outs',
        'tasks:',
        '  - id: a',
        `    command: ["${a}"]`,
        '    output: required',
        '  - id: b',
        `    command: ["${b}"]`,
        '    depends_on: [a]',
        '    inputs: { MSG: a.msg, N: a.n, SECOND: a.nested.list.1 }',
        '  - id: flaky',
        `    command: ["${flaky}"]`,
        '    retries: 1',
        '    retry_delay: 100ms',
        '',
      ].join('\n'),
    );
    expect((await cli(server.url, ['dag', 'apply', file])).code).toBe(0);
    const t = await cli(server.url, ['run', 'trigger', 'outs', '-o', 'json']);
    expect(t.code, t.stderr).toBe(0);
    const runId = JSON.parse(t.stdout).run_id as string;
    expect(await runEnds(f.db.sql, runId)).toBe('success');
    expect(JSON.parse(await readFile(path.join(f.tmp, 'inputs-seen.json'), 'utf8'))).toEqual({ a: value });
    expect(await readFile(path.join(f.tmp, 'msg-seen.txt'), 'utf8')).toBe(TRICKY);
    expect(await readFile(path.join(f.tmp, 'second-seen.txt'), 'utf8')).toBe('two');
    expect(existsSync(path.join(f.tmp, 'PWNED')) || existsSync(path.join(f.tmp, 'PWNED2'))).toBe(false);
    const stored = await f.db.sql<{ task_id: string; try_number: number; value: unknown }[]>`
      select t.task_id, o.try_number, o.value from task_outputs o join task_instances t on t.id = o.ti_id
      where t.run_id = ${runId} order by t.task_id, o.try_number`;
    expect(stored.map((r) => [r.task_id, r.try_number, r.value])).toEqual([
      ['a', 1, value],
      ['b', 1, { sum: 4 }],
      // The failed first try keeps its own output; the retry's does not overwrite it.
      ['flaky', 1, { try: 1 }],
      ['flaky', 2, { try: 2 }],
    ]);
    // Exposed through the CLI (GetTaskOutput).
    const out = await cli(server.url, ['run', 'output', runId, 'flaky', '--try', '1']);
    expect(out.code, out.stderr).toBe(0);
    expect(JSON.parse(out.stdout)).toEqual({ try: 1 });
    const latest = await cli(server.url, ['run', 'output', runId, 'b']);
    expect(JSON.parse(latest.stdout)).toEqual({ sum: 4 });
  });

  it('fails an attempt whose output is too big, not JSON, missing when required, or whose input is missing', async () => {
    const server = await start();
    const file = path.join(f.tmp, 'bad.yaml');
    await writeFile(
      file,
      [
        'dag_id: bad_outputs',
        'tasks:',
        '  - id: big',
        `    command: ["sh", "-c", "head -c 70000 /dev/zero | tr '\\\\0' 1 > $LEOFLOW_OUTPUT"]`,
        '  - id: notjson',
        `    command: ["sh", "-c", "echo '{oops' > $LEOFLOW_OUTPUT"]`,
        '  - id: silent',
        '    command: ["true"]',
        '    output: required',
        '  - id: quiet',
        '    command: ["true"]',
        '  - id: reader',
        '    command: ["true"]',
        '    depends_on: [quiet]',
        '    inputs: { V: quiet.v }',
        '',
      ].join('\n'),
    );
    const applied = await cli(server.url, ['dag', 'apply', file]);
    expect(applied.code, applied.stderr).toBe(0);
    const t = await cli(server.url, ['run', 'trigger', 'bad_outputs', '-o', 'json']);
    const runId = JSON.parse(t.stdout).run_id as string;
    expect(await runEnds(f.db.sql, runId)).toBe('failed');
    const by = await tis(runId);
    expect(by.big!.state).toBe('failed');
    expect(by.big!.error).toBe(
      'output of task "big" is too big: 68.4 KiB (70000 bytes), the limit is 64 KiB (65536 bytes) (--max-output-size); nothing stored',
    );
    expect(by.notjson!.state).toBe('failed');
    expect(by.notjson!.error).toMatch(/^output of task "notjson" is not JSON \(6 bytes\): /);
    expect(by.silent!.state).toBe('failed');
    expect(by.silent!.error).toMatch(/^task "silent" wrote no output \(its DAG says output: required\)/);
    expect(by.quiet!.state).toBe('success');
    expect(by.reader!.state).toBe('failed');
    expect(by.reader!.error).toBe('input V of task "reader" (quiet.v): upstream task "quiet" wrote no output');
    const [row] = await f.db.sql<{ n: number }[]>`
      select count(*)::int as n from task_outputs o join task_instances t on t.id = o.ti_id where t.run_id = ${runId}`;
    expect(row!.n).toBe(0);
  });
});
