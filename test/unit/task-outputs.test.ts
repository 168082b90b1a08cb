import { describe, expect, it } from 'vitest';
import { parseDag } from '../../src/core/dag/parse-dag.js';
import { buildInputs, parseInputRef } from '../../src/core/task-inputs.js';
import { checkOutput, formatBytes, OUTPUT_BYTES } from '../../src/core/task-output.js';
import { outputSize } from '../../src/server/config/setting-parsers.js';
import { issuesOf } from '../helpers/dag-sources.js';

const rule = { taskId: 'extract', required: false, maxBytes: OUTPUT_BYTES.default };
const buf = (s: string) => Buffer.from(s, 'utf8');

describe('checkOutput', () => {
  it('takes a JSON value, stored as checked', () => {
    expect(checkOutput(rule, buf('{ "a": [1, 2] }\n'), 16)).toEqual({ ok: true, json: '{"a":[1,2]}' });
    expect(checkOutput(rule, buf('"text"'), 6)).toEqual({ ok: true, json: '"text"' });
  });

  it('counts an empty or blank file, or none, as no output; required then fails, naming the task and the limit', () => {
    expect(checkOutput(rule, buf(''), 0)).toEqual({ ok: true, json: null });
    expect(checkOutput(rule, buf(' \n'), 2)).toEqual({ ok: true, json: null });
    expect(checkOutput(rule, null, 0)).toEqual({ ok: true, json: null });
    expect(checkOutput({ ...rule, required: true }, null, 0)).toEqual({
      ok: false,
      error:
        'task "extract" wrote no output (its DAG says output: required): write a JSON value to the file named by LEOFLOW_OUTPUT (limit 64 KiB (65536 bytes))',
    });
  });

  it('refuses one over the limit, naming the task, the size and the limit, whatever it holds', () => {
    expect(checkOutput(rule, buf('1'.repeat(65537)), 65537)).toEqual({
      ok: false,
      error:
        'output of task "extract" is too big: 64.0 KiB (65537 bytes), the limit is 64 KiB (65536 bytes) (--max-output-size); nothing stored',
    });
    // At the limit exactly: taken.
    expect(checkOutput(rule, buf('1'.repeat(65536)), 65536).ok).toBe(true);
  });

  it('refuses what is not JSON, naming the task and the size', () => {
    const r = checkOutput(rule, buf('{oops'), 5);
    expect(r.ok).toBe(false);
    expect(!r.ok && r.error).toMatch(/^output of task "extract" is not JSON \(5 bytes\): .*; nothing stored$/);
  });

  it('formats sizes for a human', () => {
    expect(formatBytes(100)).toBe('100 bytes');
    expect(formatBytes(1024 * 1024)).toBe('1 MiB (1048576 bytes)');
  });
});

describe('--max-output-size', () => {
  it('takes bytes, KiB and MiB up to 1 MiB, and refuses more with an exact message', () => {
    expect(outputSize('65536')).toBe(65536);
    expect(outputSize('256KiB')).toBe(262144);
    expect(outputSize('1MiB')).toBe(OUTPUT_BYTES.max);
    expect(() => outputSize('2MiB')).toThrow('must be at most 1MiB (1048576 bytes), got "2MiB"');
    expect(() => outputSize('lots')).toThrow('must be a size in bytes, or with KiB or MiB (e.g. 256KiB), got "lots"');
    expect(() => outputSize('0')).toThrow(/^must be a size in bytes/);
  });
});

describe('buildInputs', () => {
  const outputs = new Map([
    ['extract', '{"path":"/tmp/x y","n":3,"ok":true,"list":[1,{"k":"v"}],"nil":null}'],
    ['a.b', '"dotted"'],
  ]);

  it('makes the inputs file keyed by upstream id, and the variables from scalar values', () => {
    const r = buildInputs('load', ['extract', 'a.b', 'quiet'], outputs, {
      P: 'extract.path',
      N: 'extract.n',
      OK: 'extract.ok',
      K: 'extract.list.1.k',
      D: 'a.b',
    });
    expect(r).toEqual({
      json: `{"extract":${outputs.get('extract')},"a.b":"dotted"}`,
      env: { P: '/tmp/x y', N: '3', OK: 'true', K: 'v', D: 'dotted' },
    });
    expect(JSON.parse((r as { json: string }).json).extract.n).toBe(3);
  });

  it('says which input is missing, never an empty string', () => {
    expect(buildInputs('load', ['quiet'], outputs, { V: 'quiet.v' })).toEqual({
      error: 'input V of task "load" (quiet.v): upstream task "quiet" wrote no output',
    });
    expect(buildInputs('load', ['extract'], outputs, { V: 'extract.nope' })).toEqual({
      error: 'input V of task "load" (extract.nope): the output of "extract" has no extract.nope',
    });
    expect(buildInputs('load', ['extract'], outputs, { V: 'extract.list' })).toEqual({
      error:
        'input V of task "load" (extract.list): is a list, not a string, number or boolean (read it from LEOFLOW_INPUTS instead)',
    });
    expect(buildInputs('load', ['extract'], outputs, { V: 'extract.nil' })).toMatchObject({
      error: expect.stringMatching(/is null, not a string/),
    });
  });

  it('reads a task id holding dots as the longest upstream it starts with', () => {
    expect(parseInputRef('a.b.c', ['a', 'a.b'])).toEqual({ task: 'a.b', path: ['c'] });
    expect(parseInputRef('x.y', [])).toEqual({ task: 'x', path: ['y'] });
  });
});

describe('the DAG keys output and inputs', () => {
  const file = (b: string) =>
    `dag_id: d\ntasks:\n  - id: a\n    command: ["true"]\n    output: required\n  - id: b\n    command: ["true"]\n    depends_on: [a]\n${b}`;

  it('reads output: required and inputs:, absent when not given', () => {
    const spec = parseDag(file('    inputs: { P: a.path }\n'), 'f.yaml');
    expect(spec.tasks[0]!.output).toBe('required');
    expect(spec.tasks[1]!.inputs).toEqual({ P: 'a.path' });
    expect(spec.tasks[1]).not.toHaveProperty('output');
    expect(parseDag(file(''), 'f.yaml').tasks[1]).not.toHaveProperty('inputs');
  });

  it('refuses an input from a task that is not upstream, a reserved or bad name, and a bad output mode', () => {
    expect(
      issuesOf(
        file(
          '    output: always\n    env: { P: x }\n    inputs: { P: a.path, Q: other.v, LEOFLOW_X: a.v, 1BAD: a.v, E: "a..v" }\n',
        ),
      ),
    ).toEqual([
      { path: 'tasks[1].output', message: expect.stringMatching(/required, optional/) },
      { path: 'tasks[1].inputs.LEOFLOW_X', message: '"LEOFLOW_X": names starting with LEOFLOW_ are Leoflow\'s own' },
      { path: 'tasks[1].inputs["1BAD"]', message: expect.stringMatching(/^invalid environment variable name "1BAD"/) },
      { path: 'tasks[1].inputs.E', message: expect.stringMatching(/upstream_task or upstream_task.path.to.value/) },
      { path: 'tasks[1].inputs.P', message: '"P" is set in env too: give it one source' },
      {
        path: 'tasks[1].inputs.Q',
        message: '"other.v" names task "other", which is not in depends_on: an input comes from an upstream task',
      },
    ]);
  });
});
