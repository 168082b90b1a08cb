import { readFileSync } from 'node:fs';

import { describe, expect, it } from 'vitest';

import { DagValidationError, type DagIssue, type TaskSpec } from '../../src/core/dag-spec.js';
import { MAX_DAG_SOURCE_BYTES } from '../../src/core/dag/check-dag-source-size.js';
import { parseDag } from '../../src/core/dag/parse-dag.js';

const FILE = 'dags/test.yaml';

/** The issues parseDag reports for `source`; fails the test if it does not throw one DagValidationError. */
function issuesOf(source: string): DagIssue[] {
  try {
    parseDag(source, FILE);
  } catch (err) {
    expect(err).toBeInstanceOf(DagValidationError);
    const e = err as DagValidationError;
    expect(e.file).toBe(FILE);
    return e.issues;
  }
  throw new Error('expected parseDag to throw a DagValidationError');
}

/** A valid DAG with `extra` appended to the top level and `task` to a single task `a`. */
function dag(task = '', extra = ''): string {
  return `dag_id: t\ntasks:\n  - id: a\n    command: [echo, a]\n${indent(task, 4)}${extra}`;
}

function indent(text: string, spaces: number): string {
  return text
    .split('\n')
    .filter(Boolean)
    .map((l) => `${' '.repeat(spaces)}${l}\n`)
    .join('');
}

/** Tasks as flow mappings, one per line. */
function tasks(...lines: string[]): string {
  return `dag_id: t\ntasks:\n${lines.map((l) => `  - ${l}\n`).join('')}`;
}

const TASK_DEFAULTS: Omit<TaskSpec, 'id' | 'command'> = {
  dependsOn: [],
  triggerRule: 'all_success',
  retries: 0,
  retryDelayMs: 10_000,
  maxRetryDelayMs: 3_600_000,
  timeoutMs: null,
  env: {},
  cwd: null,
  executor: 'default',
  image: null,
  placement: null,
};

const DAG_KEYS =
  'dag_id, description, schedule, timezone, catchup, start_date, max_active_runs, priority, tags, triggers, notify, deadline, tasks';
const TASK_KEYS =
  'id, command, depends_on, trigger_rule, retries, retry_delay, max_retry_delay, timeout, env, cwd, executor, image, placement, priority, kubernetes, wait, approval, output, inputs';
const PLACEMENT_KEYS = 'labels, capabilities, allowed_agents, forbidden_agents, max_parallel_per_agent';
const DURATION = 'expected a duration like "30s", "5m" or "1h30m"';

describe('parseDag: valid files', () => {
  it('reads priorities on the DAG and its tasks, and leaves them out of a spec that sets none (its hash unchanged)', () => {
    const spec = parseDag(dag('priority: -5', 'priority: 10\n'), FILE);
    expect(spec.priority).toBe(10);
    expect(spec.tasks[0]!.priority).toBe(-5);
    expect(issuesOf(dag('', 'priority: -1001\n'))).toEqual([
      { path: 'priority', message: 'expected an integer from -1000 to 1000, got -1001' },
    ]);
    const plain = parseDag(dag(), FILE);
    expect('priority' in plain || 'priority' in plain.tasks[0]!).toBe(false);
  });

  it('fills every default', () => {
    expect(parseDag(dag(), FILE)).toEqual({
      dagId: 't',
      description: '',
      schedule: null,
      timezone: 'UTC',
      catchup: false,
      startDate: null,
      maxActiveRuns: 16,
      tags: [],
      tasks: [{ id: 'a', command: ['echo', 'a'], ...TASK_DEFAULTS }],
    });
  });

  it('reads every field', () => {
    const spec = parseDag(
      `
dag_id: etl.v2
description: Extract and load
schedule: "*/5   * * * *"
timezone: Europe/Paris
catchup: true
start_date: 2024-01-15T06:00:00+01:00
max_active_runs: 1
tags: [etl, nightly]
tasks:
  - id: extract
    command: ["sh", "-c", "echo extracting"]
    retries: 2
    retry_delay: 30s
    max_retry_delay: 10m
    timeout: 5m
    env: { REGION: eu, EMPTY: "" }
    cwd: /srv/etl
  - id: transform
    command: transform --fast
    depends_on: [extract]
    trigger_rule: none_failed
    executor: agents
    image: ghcr.io/acme/transform:1.4
    placement:
      labels: { gpu: nvidia, "kubernetes.io/arch": amd64 }
      capabilities: [cuda]
      allowed_agents: [agent-1, agent-2]
      forbidden_agents: [agent-3]
      max_parallel_per_agent: 1
`,
      FILE,
    );
    expect(spec).toEqual({
      dagId: 'etl.v2',
      description: 'Extract and load',
      schedule: '*/5 * * * *',
      timezone: 'Europe/Paris',
      catchup: true,
      startDate: '2024-01-15T05:00:00.000Z',
      maxActiveRuns: 1,
      tags: ['etl', 'nightly'],
      tasks: [
        {
          ...TASK_DEFAULTS,
          id: 'extract',
          command: ['sh', '-c', 'echo extracting'],
          retries: 2,
          retryDelayMs: 30_000,
          maxRetryDelayMs: 600_000,
          timeoutMs: 300_000,
          env: { REGION: 'eu', EMPTY: '' },
          cwd: '/srv/etl',
        },
        {
          ...TASK_DEFAULTS,
          id: 'transform',
          command: ['sh', '-c', 'transform --fast'],
          dependsOn: ['extract'],
          triggerRule: 'none_failed',
          executor: 'agents',
          image: 'ghcr.io/acme/transform:1.4',
          placement: {
            labels: { gpu: 'nvidia', 'kubernetes.io/arch': 'amd64' },
            capabilities: ['cuda'],
            allowedAgents: ['agent-1', 'agent-2'],
            forbiddenAgents: ['agent-3'],
            maxParallelPerAgent: 1,
          },
        },
      ],
    });
  });

  it('refuses placement on a task whose executor is not agents (it would be ignored)', () => {
    for (const executor of ['subprocess', 'kubernetes']) {
      expect(
        issuesOf(tasks(`{id: a, command: "true", executor: ${executor}, placement: {labels: {gpu: nvidia}}}`)),
      ).toEqual([
        {
          path: 'tasks[0].placement',
          message: `applies only to tasks with executor: agents; this task's executor is ${executor}`,
        },
      ]);
    }
    expect(
      parseDag(tasks('{id: a, command: "true", executor: agents, placement: {labels: {gpu: nvidia}}}'), FILE).tasks[0]
        ?.placement?.labels,
    ).toEqual({ gpu: 'nvidia' });
  });

  it('turns a command string into sh -c, and keeps an argv list as is', () => {
    const spec = parseDag(tasks('{id: a, command: "echo $HOME && ls"}', '{id: b, command: [ls, "-l", ""]}'), FILE);
    expect(spec.tasks[0]?.command).toEqual(['sh', '-c', 'echo $HOME && ls']);
    expect(spec.tasks[1]?.command).toEqual(['ls', '-l', '']);
  });

  it('reads JSON', () => {
    const spec = parseDag(
      JSON.stringify({
        dag_id: 'json_dag',
        schedule: '@daily',
        tasks: [
          { id: 'a', command: ['true'], retry_delay: 5 },
          { id: 'b', command: 'echo b', depends_on: ['a'], env: { X: '1' } },
        ],
      }),
      'dags/x.json',
    );
    expect(spec.dagId).toBe('json_dag');
    expect(spec.schedule).toBe('@daily');
    expect(spec.tasks.map((t) => [t.id, t.command, t.dependsOn, t.retryDelayMs, t.env])).toEqual([
      ['a', ['true'], [], 5_000, {}],
      ['b', ['sh', '-c', 'echo b'], ['a'], 10_000, { X: '1' }],
    ]);
  });

  it('keeps tasks and dependencies in file order', () => {
    const spec = parseDag(
      tasks('{id: z, command: x, depends_on: [m, y]}', '{id: y, command: x}', '{id: m, command: x}'),
      FILE,
    );
    expect(spec.tasks.map((t) => t.id)).toEqual(['z', 'y', 'm']);
    expect(spec.tasks[0]?.dependsOn).toEqual(['m', 'y']);
  });

  it.each(['@hourly', '@daily', '@weekly', '@monthly', '@yearly', '0 0 * * MON-FRI', '*/10 * * * * *'])(
    'accepts the schedule %j',
    (schedule) => {
      expect(parseDag(dag('', `schedule: "${schedule}"\n`), FILE).schedule).toBe(schedule);
    },
  );

  it('treats a null schedule, timeout, cwd, image, placement and start_date as absent', () => {
    const spec = parseDag(dag('timeout: null\ncwd: ~\nimage:\nplacement: null', 'schedule:\nstart_date: null\n'), FILE);
    expect(spec.schedule).toBeNull();
    expect(spec.startDate).toBeNull();
    expect(spec.tasks[0]).toMatchObject({ timeoutMs: null, cwd: null, image: null, placement: null });
  });

  it('fills placement defaults when only some placement keys are given', () => {
    const spec = parseDag(dag('placement: { labels: { zone: a } }'), FILE);
    expect(spec.tasks[0]?.placement).toEqual({
      labels: { zone: 'a' },
      capabilities: [],
      allowedAgents: [],
      forbiddenAgents: [],
      maxParallelPerAgent: null,
    });
  });

  it('normalises start_date to an ISO instant, reading times without offset in the DAG time zone', () => {
    const at = (startDate: string, timezone?: string): string | null =>
      parseDag(dag('', `start_date: "${startDate}"\n${timezone ? `timezone: ${timezone}\n` : ''}`), FILE).startDate;
    expect(at('2024-01-01')).toBe('2024-01-01T00:00:00.000Z');
    expect(at('2024-01-01T06:30')).toBe('2024-01-01T06:30:00.000Z');
    expect(at('2024-01-01 06:30:15.25Z')).toBe('2024-01-01T06:30:15.250Z');
    expect(at('2024-01-01T06:30:00-08:00')).toBe('2024-01-01T14:30:00.000Z');
    expect(at('2024-01-01T06:30:00+0530')).toBe('2024-01-01T01:00:00.000Z');
    expect(at('2024-01-01', 'Europe/Paris')).toBe('2023-12-31T23:00:00.000Z');
    expect(at('2024-07-01T12:00', 'America/New_York')).toBe('2024-07-01T16:00:00.000Z');
    // An explicit offset wins over the DAG's time zone.
    expect(at('2024-07-01T12:00Z', 'America/New_York')).toBe('2024-07-01T12:00:00.000Z');
    expect(at('2024-02-29')).toBe('2024-02-29T00:00:00.000Z');
  });

  it('raises the default max_retry_delay to a longer retry_delay instead of contradicting it', () => {
    const spec = parseDag(dag('retry_delay: 2h'), FILE);
    expect(spec.tasks[0]).toMatchObject({ retryDelayMs: 7_200_000, maxRetryDelayMs: 7_200_000 });
  });

  it('keeps an environment variable named __proto__ as a plain key', () => {
    const env = parseDag(dag('env: { __proto__: "x", A: "1" }'), FILE).tasks[0]?.env;
    expect(Object.getPrototypeOf(env)).toBe(Object.prototype);
    expect(Object.keys(env ?? {})).toEqual(['__proto__', 'A']);
    expect(JSON.stringify(env)).toBe('{"__proto__":"x","A":"1"}');
  });

  it('accepts exactly 10,000 tasks in a chain, quickly', () => {
    const lines = Array.from({ length: 10_000 }, (_, i) =>
      i === 0 ? '{id: t0, command: x}' : `{id: t${i}, command: x, depends_on: [t${i - 1}]}`,
    );
    const started = performance.now();
    const spec = parseDag(tasks(...lines), FILE);
    expect(spec.tasks).toHaveLength(10_000);
    expect(spec.tasks[9_999]?.dependsOn).toEqual(['t9998']);
    // Generous: the point is "no quadratic step", not a benchmark (YAML parsing alone is ~1 s here).
    expect(performance.now() - started).toBeLessThan(10_000);
  });

  it.each(['hello.yaml', 'fan-out.yaml'])('parses examples/%s', (name) => {
    const path = new URL(`../../examples/${name}`, import.meta.url);
    const spec = parseDag(readFileSync(path, 'utf8'), `examples/${name}`);
    if (name === 'hello.yaml') {
      expect(spec.dagId).toBe('hello');
      expect(spec.tasks.map((t) => [t.id, t.dependsOn])).toEqual([
        ['greet', []],
        ['goodbye', ['greet']],
      ]);
    } else {
      expect(spec.dagId).toBe('fan_out');
      expect(spec.tasks.map((t) => [t.id, t.dependsOn, t.triggerRule])).toEqual([
        ['start', [], 'all_success'],
        ['count', ['start'], 'all_success'],
        ['sum', ['start'], 'all_success'],
        ['flaky', ['start'], 'all_success'],
        ['join', ['count', 'flaky', 'sum'], 'all_success'],
      ]);
      const flaky = spec.tasks.find((t) => t.id === 'flaky');
      expect(flaky).toMatchObject({ retries: 2, retryDelayMs: 1_000 });
      expect(flaky?.command.join(' ')).toContain('LEOFLOW_TRY_NUMBER');
    }
    expect(spec.schedule).toBeNull();
  });
});

describe('parseDag: document-level errors', () => {
  it('reports a YAML syntax error with its line and column, and nothing else', () => {
    expect(issuesOf('dag_id: t\ntasks: [a, b\nfoo: 1\n')).toEqual([
      {
        path: '',
        message:
          'invalid YAML: Flow sequence in block collection must be sufficiently indented and end with a ] at line 3, column 1',
      },
    ]);
  });

  it('reports a duplicate key with its line', () => {
    expect(issuesOf('dag_id: t\ntasks: []\ndag_id: u\n')).toEqual([
      { path: '', message: 'invalid YAML: Map keys must be unique at line 3, column 1' },
    ]);
  });

  it('reports a tab used as indentation', () => {
    expect(issuesOf('dag_id: t\ntasks:\n\t- id: a\n')[0]?.message).toMatch(/^invalid YAML: .* at line 3, column 1$/);
  });

  it('rejects an alias bomb fast', () => {
    const bomb = [
      'a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]',
      ...'bcdefghi'.split('').map((k, i) => {
        const prev = 'abcdefghi'[i] as string;
        return `${k}: &${k} [${Array(9).fill(`*${prev}`).join(', ')}]`;
      }),
    ].join('\n');
    const started = performance.now();
    expect(issuesOf(bomb)).toEqual([
      {
        path: '',
        message: 'invalid YAML: too many alias expansions (limit 100); the document looks like an alias bomb',
      },
    ]);
    expect(performance.now() - started).toBeLessThan(1_000);
  });

  it('reports an alias to an undefined anchor', () => {
    expect(issuesOf('dag_id: *nope\ntasks: []\n')).toEqual([
      { path: '', message: 'invalid YAML: Unresolved alias (the anchor must be set before the alias): nope' },
    ]);
  });

  it('reports tags other than the core ones', () => {
    expect(issuesOf('dag_id: !custom t\nstart_date: !!timestamp 2024-01-01\ntasks: []\n')).toEqual([
      { path: '', message: 'invalid YAML: Unresolved tag: !custom at line 1, column 9' },
      { path: '', message: 'invalid YAML: Unresolved tag: tag:yaml.org,2002:timestamp at line 2, column 13' },
    ]);
  });

  it('rejects more than one document', () => {
    expect(issuesOf(`${dag()}---\n${dag()}`)[0]?.message).toMatch(
      /^invalid YAML: Source contains multiple documents; .* at line \d+, column 1$/,
    );
  });

  it('rejects a mapping key that is not a scalar', () => {
    expect(issuesOf('? [a, b]\n: 1\n')[0]?.message).toBe(
      'invalid YAML: With stringKeys, all keys must be strings at line 1, column 3',
    );
  });

  it.each([
    ['- a\n- b\n', 'a list'],
    ['just a string\n', '"just a string"'],
    ['42\n', '42'],
  ])('rejects a document that is not a mapping: %j', (source, got) => {
    expect(issuesOf(source)).toEqual([
      { path: '', message: `expected the document to be a mapping with at least dag_id and tasks, got ${got}` },
    ]);
  });

  it.each(['', '\n\n', '# only a comment\n'])('says an empty file is empty: %j', (source) => {
    expect(issuesOf(source)).toEqual([
      { path: '', message: 'the file is empty; a DAG file needs at least dag_id and tasks' },
    ]);
  });

  it('rejects a source over 1 MiB before parsing it', () => {
    const padding = `# ${'x'.repeat(MAX_DAG_SOURCE_BYTES)}\n`;
    expect(issuesOf(dag() + padding)).toEqual([
      {
        path: '',
        message: `the DAG file is ${dag().length + padding.length} bytes; the limit is 1048576 bytes (1 MiB)`,
      },
    ]);
  });

  it('counts UTF-8 bytes, not characters, against the limit', () => {
    // 400,000 three-byte characters: under 1 Mi characters, over 1 MiB.
    const comment = `# ${'€'.repeat(400_000)}\n`;
    expect(issuesOf(dag() + comment)[0]?.message).toBe(
      `the DAG file is ${dag().length + 2 + 1_200_000 + 1} bytes; the limit is 1048576 bytes (1 MiB)`,
    );
    // Just under the limit in bytes parses.
    expect(parseDag(dag() + `# ${'€'.repeat(300_000)}\n`, FILE).dagId).toBe('t');
  });

  it('rejects more than 10,000 tasks', () => {
    const lines = Array.from({ length: 10_001 }, (_, i) => `{id: t${i}, command: x}`);
    expect(issuesOf(tasks(...lines))).toEqual([
      { path: 'tasks', message: 'too many tasks: 10001; the limit is 10000' },
    ]);
  });
});

describe('parseDag: unknown and missing keys', () => {
  it('names an unknown top-level key, suggests a close one and lists the allowed ones', () => {
    expect(issuesOf(dag('', 'schedul: "@daily"\nowner: me\n'))).toEqual([
      { path: 'schedul', message: `unknown key "schedul" (did you mean "schedule"?); allowed keys: ${DAG_KEYS}` },
      { path: 'owner', message: `unknown key "owner"; allowed keys: ${DAG_KEYS}` },
    ]);
  });

  it('names an unknown task key', () => {
    expect(issuesOf(dag('dependson: []\npool: x'))).toEqual([
      {
        path: 'tasks[0].dependson',
        message: `unknown key "dependson" (did you mean "depends_on"?); allowed keys: ${TASK_KEYS}`,
      },
      { path: 'tasks[0].pool', message: `unknown key "pool"; allowed keys: ${TASK_KEYS}` },
    ]);
  });

  it('names an unknown placement key', () => {
    expect(issuesOf(dag('placement: { label: {}, max_parallel: 2 }'))).toEqual([
      {
        path: 'tasks[0].placement.label',
        message: `unknown key "label" (did you mean "labels"?); allowed keys: ${PLACEMENT_KEYS}`,
      },
      {
        path: 'tasks[0].placement.max_parallel',
        message: `unknown key "max_parallel"; allowed keys: ${PLACEMENT_KEYS}`,
      },
    ]);
  });

  it('quotes a key that is not a plain name in the path', () => {
    expect(issuesOf(dag('', '"weird key": 1\n'))).toEqual([
      { path: '["weird key"]', message: `unknown key "weird key"; allowed keys: ${DAG_KEYS}` },
    ]);
  });

  it('reports missing required keys', () => {
    expect(issuesOf('description: nothing else\n')).toEqual([
      { path: 'dag_id', message: 'missing required key "dag_id"' },
      { path: 'tasks', message: 'missing required key "tasks"' },
    ]);
    expect(issuesOf(tasks('{retries: 1}'))).toEqual([
      { path: 'tasks[0].id', message: 'missing required key "id"' },
      { path: 'tasks[0].command', message: 'missing required key "command"' },
    ]);
  });
});

describe('parseDag: type errors', () => {
  const ID_RULE = 'an id of 1-100 letters, digits, "_", "." or "-", starting with a letter or digit';

  it.each([
    ['dag_id: -t', 'dag_id', `expected ${ID_RULE}, got "-t"`],
    ['dag_id: "a b"', 'dag_id', `expected ${ID_RULE}, got "a b"`],
    [`dag_id: ${'a'.repeat(101)}`, 'dag_id', `expected ${ID_RULE}, got "${'a'.repeat(60)}…"`],
    ['dag_id: 42', 'dag_id', `expected ${ID_RULE}, got 42`],
  ])('rejects a bad dag_id: %s', (line, path, message) => {
    expect(issuesOf(`${line}\ntasks: [{id: a, command: x}]\n`)).toEqual([{ path, message }]);
  });

  it.each([
    ['description: 5', 'description', 'expected a string, got 5'],
    ['timezone: 1', 'timezone', 'expected an IANA time zone like "Europe/Paris", got 1'],
    ['catchup: yes', 'catchup', 'expected true or false, got "yes"'],
    ['catchup: 1', 'catchup', 'expected true or false, got 1'],
    ['max_active_runs: 0', 'max_active_runs', 'expected a positive integer, got 0'],
    ['max_active_runs: 1.5', 'max_active_runs', 'expected a positive integer, got 1.5'],
    ['max_active_runs: "3"', 'max_active_runs', 'expected a positive integer, got "3"'],
    [
      'max_active_runs: 3000000000',
      'max_active_runs',
      'expected a positive integer no larger than 2147483647, got 3000000000',
    ],
    ['tags: etl', 'tags', 'expected a list of tag strings, got "etl"'],
    ['tags: [etl, 5]', 'tags[1]', 'expected a non-empty tag string, got 5'],
    ['tags: [etl, etl]', 'tags[1]', 'duplicate tag "etl"'],
    [
      'start_date: 2024-13-01',
      'start_date',
      '"2024-13-01" is not a valid date or time; expected an ISO 8601 date or date-time like "2024-01-01" or "2024-01-01T06:00:00Z"',
    ],
    [
      'start_date: 2023-02-29',
      'start_date',
      '"2023-02-29" is not a valid date or time; expected an ISO 8601 date or date-time like "2024-01-01" or "2024-01-01T06:00:00Z"',
    ],
    [
      'start_date: 2024-01-01T24:00',
      'start_date',
      '"2024-01-01T24:00" is not a valid date or time; expected an ISO 8601 date or date-time like "2024-01-01" or "2024-01-01T06:00:00Z"',
    ],
    [
      'start_date: yesterday',
      'start_date',
      'expected an ISO 8601 date or date-time like "2024-01-01" or "2024-01-01T06:00:00Z", got "yesterday"',
    ],
    [
      'start_date: 1704067200',
      'start_date',
      'expected an ISO 8601 date or date-time like "2024-01-01" or "2024-01-01T06:00:00Z", got 1704067200',
    ],
  ])('rejects a bad top-level field: %s', (line, path, message) => {
    expect(issuesOf(dag('', `${line}\n`))).toEqual([{ path, message }]);
  });

  it.each([
    ['tasks: {a: 1}', 'expected a non-empty list of tasks, got a mapping'],
    ['tasks: []', 'expected a non-empty list of tasks, got an empty list'],
    ['tasks:', 'expected a non-empty list of tasks, got null'],
  ])('rejects bad tasks: %s', (line, message) => {
    expect(issuesOf(`dag_id: t\n${line}\n`)).toEqual([{ path: 'tasks', message }]);
  });

  it('rejects a bad task id', () => {
    expect(issuesOf(tasks('{id: "a/b", command: x}', '{id: "", command: x}'))).toEqual([
      { path: 'tasks[0].id', message: `expected ${ID_RULE}, got "a/b"` },
      { path: 'tasks[1].id', message: `expected ${ID_RULE}, got ""` },
    ]);
  });

  it('rejects a task that is not a mapping', () => {
    expect(issuesOf(tasks('{id: a, command: x}', 'just-a-string'))).toEqual([
      { path: 'tasks[1]', message: 'expected a task mapping with at least id and command, got "just-a-string"' },
    ]);
  });

  it.each([
    [
      'trigger_rule: all_sucess',
      'tasks[0].trigger_rule',
      'expected one of all_success, all_done, one_success, one_failed, none_failed, got "all_sucess" (did you mean "all_success"?)',
    ],
    [
      'trigger_rule: always',
      'tasks[0].trigger_rule',
      'expected one of all_success, all_done, one_success, one_failed, none_failed, got "always"',
    ],
    ['retries: -1', 'tasks[0].retries', 'expected an integer from 0 to 100, got -1'],
    ['retries: 101', 'tasks[0].retries', 'expected an integer from 0 to 100, got 101'],
    ['retries: "2"', 'tasks[0].retries', 'expected an integer from 0 to 100, got "2"'],
    ['retry_delay: 5 minutes', 'tasks[0].retry_delay', `${DURATION}, got "5 minutes"`],
    ['max_retry_delay: 1.5h', 'tasks[0].max_retry_delay', `${DURATION}, got "1.5h"`],
    ['timeout: forever', 'tasks[0].timeout', `${DURATION}, got "forever"`],
    ['timeout: 0s', 'tasks[0].timeout', 'must be greater than 0 (leave timeout out for no timeout), got "0s"'],
    ['retry_delay: 1m\nmax_retry_delay: 30s', 'tasks[0].max_retry_delay', 'must be at least retry_delay (1m), got 30s'],
    [
      'env: [A=1]',
      'tasks[0].env',
      'expected a mapping of environment variable names to strings or { secret: … }, got a list',
    ],
    ['env: { PORT: 8080 }', 'tasks[0].env.PORT', 'expected a string, got 8080 (quote it: "8080")'],
    ['env: { DEBUG: true }', 'tasks[0].env.DEBUG', 'expected a string, got true (quote it: "true")'],
    ['env: { NOTHING: null }', 'tasks[0].env.NOTHING', 'expected a string, got null'],
    [
      'env: { 1X: "a" }',
      'tasks[0].env["1X"]',
      'invalid environment variable name "1X": expected letters, digits and "_", not starting with a digit',
    ],
    [
      'env: { MY-VAR: "a" }',
      'tasks[0].env.MY-VAR',
      'invalid environment variable name "MY-VAR": expected letters, digits and "_", not starting with a digit',
    ],
    ['cwd: ""', 'tasks[0].cwd', 'expected a non-empty string, got ""'],
    ['cwd: 5', 'tasks[0].cwd', 'expected a non-empty string, got 5'],
    ['executor: k8s', 'tasks[0].executor', 'expected one of default, subprocess, kubernetes, agents, got "k8s"'],
    [
      'executor: agent',
      'tasks[0].executor',
      'expected one of default, subprocess, kubernetes, agents, got "agent" (did you mean "agents"?)',
    ],
    ['image: [x]', 'tasks[0].image', 'expected a non-empty string, got a list'],
    ['placement: gpu', 'tasks[0].placement', 'expected a placement mapping, got "gpu"'],
    ['placement: { labels: { gpu: 1 } }', 'tasks[0].placement.labels.gpu', 'expected a string, got 1 (quote it: "1")'],
    [
      'placement: { labels: [gpu] }',
      'tasks[0].placement.labels',
      'expected a mapping of label names to string values, got a list',
    ],
    [
      'placement: { capabilities: cuda }',
      'tasks[0].placement.capabilities',
      'expected a list of capability strings, got "cuda"',
    ],
    [
      'placement: { allowed_agents: [a, ""] }',
      'tasks[0].placement.allowed_agents[1]',
      'expected a non-empty agent id string, got ""',
    ],
    ['placement: { forbidden_agents: [a, a] }', 'tasks[0].placement.forbidden_agents[1]', 'duplicate agent id "a"'],
    [
      'placement: { max_parallel_per_agent: 0 }',
      'tasks[0].placement.max_parallel_per_agent',
      'expected a positive integer, got 0',
    ],
    ['depends_on: a', 'tasks[0].depends_on', 'expected a list of task ids, got "a"'],
    ['priority: 1001', 'tasks[0].priority', 'expected an integer from -1000 to 1000, got 1001'],
    ['priority: high', 'tasks[0].priority', 'expected an integer from -1000 to 1000, got "high"'],
  ])('rejects a bad task field: %s', (line, path, message) => {
    expect(issuesOf(dag(line))).toEqual([{ path, message }]);
  });

  it.each([
    [
      'command: ""',
      'tasks[0].command',
      'expected a non-empty list of strings (argv) or a non-empty shell command string, got ""',
    ],
    [
      'command: "   "',
      'tasks[0].command',
      'expected a non-empty list of strings (argv) or a non-empty shell command string, got "   "',
    ],
    [
      'command: []',
      'tasks[0].command',
      'expected a non-empty list of strings (argv) or a non-empty shell command string, got an empty list',
    ],
    [
      'command: 5',
      'tasks[0].command',
      'expected a non-empty list of strings (argv) or a non-empty shell command string, got 5',
    ],
    [
      'command: { run: x }',
      'tasks[0].command',
      'expected a non-empty list of strings (argv) or a non-empty shell command string, got a mapping',
    ],
    ['command: [sleep, 1]', 'tasks[0].command[1]', 'expected a string, got 1 (quote it: "1")'],
    ['command: ["", x]', 'tasks[0].command[0]', 'expected a non-empty string, got ""'],
    ['command: ["a\\0b"]', 'tasks[0].command[0]', 'must not contain a NUL character'],
  ])('rejects a bad command: %s', (line, path, message) => {
    expect(issuesOf(tasks(`{id: a, ${line}}`))).toEqual([{ path, message }]);
  });

  it('collects every issue of a file, in file order, in one error', () => {
    let error: unknown;
    try {
      parseDag(
        'dag_id: 5\ncatchup: no\ntasks:\n  - {id: a, command: 1, retries: x}\n  - {id: b, command: x, bogus: 1}\n',
        FILE,
      );
    } catch (err) {
      error = err;
    }
    expect(error).toBeInstanceOf(DagValidationError);
    const e = error as DagValidationError;
    expect(e.issues.map((i) => i.path)).toEqual([
      'dag_id',
      'catchup',
      'tasks[0].command',
      'tasks[0].retries',
      'tasks[1].bogus',
    ]);
    expect(e.message.split('\n')).toEqual([
      `${FILE}: invalid DAG:`,
      `  ${FILE}: dag_id: expected an id of 1-100 letters, digits, "_", "." or "-", starting with a letter or digit, got 5`,
      `  ${FILE}: catchup: expected true or false, got "no"`,
      `  ${FILE}: tasks[0].command: expected a non-empty list of strings (argv) or a non-empty shell command string, got 1`,
      `  ${FILE}: tasks[0].retries: expected an integer from 0 to 100, got "x"`,
      `  ${FILE}: tasks[1].bogus: unknown key "bogus"; allowed keys: ${TASK_KEYS}`,
    ]);
  });
});

describe('parseDag: schedule and time zone', () => {
  it.each([
    ['"61 * * * *"', 'invalid cron expression "61 * * * *": Constraint error, got value 61 expected range 0-59'],
    [
      '"* * *"',
      'invalid cron expression "* * *": expected 5 fields (minute hour day-of-month month day-of-week) or 6 (with seconds first), got 3',
    ],
    [
      '"* * * * * * *"',
      'invalid cron expression "* * * * * * *": expected 5 fields (minute hour day-of-month month day-of-week) or 6 (with seconds first), got 7',
    ],
    [
      '""',
      'invalid cron expression "": expected 5 fields (minute hour day-of-month month day-of-week) or 6 (with seconds first), got 0',
    ],
    ['"a b c d e"', 'invalid cron expression "a b c d e": Invalid characters, got value: a'],
    ['"0 0 31 2 *"', 'invalid cron expression "0 0 31 2 *": Invalid explicit day of month definition'],
    ['"H * * * *"', 'invalid cron expression "H * * * *": "H" (hashed) values are not supported'],
    [
      '"@dayly"',
      'expected a cron expression like "*/5 * * * *" or one of @hourly, @daily, @weekly, @monthly, @yearly, got "@dayly" (did you mean "@daily"?)',
    ],
    [
      '"@reboot"',
      'expected a cron expression like "*/5 * * * *" or one of @hourly, @daily, @weekly, @monthly, @yearly, got "@reboot"',
    ],
    ['5', 'expected a cron expression like "*/5 * * * *" or one of @hourly, @daily, @weekly, @monthly, @yearly, got 5'],
  ])('rejects the schedule %s', (value, message) => {
    expect(issuesOf(dag('', `schedule: ${value}\n`))).toEqual([{ path: 'schedule', message }]);
  });

  it('accepts a day name containing H (THU) while rejecting hashed H', () => {
    expect(parseDag(dag('', 'schedule: "0 9 * * THU"\n'), FILE).schedule).toBe('0 9 * * THU');
  });

  it.each([
    ['Mars/Base', '"Mars/Base"'],
    ['Europe/Pariss', '"Europe/Pariss"'],
    ['"+01:00"', '"+01:00"'],
    ['""', '""'],
  ])('rejects the time zone %s', (yamlValue, shown) => {
    expect(issuesOf(dag('', `timezone: ${yamlValue}\n`))).toEqual([
      { path: 'timezone', message: `unknown time zone ${shown}; expected an IANA name like "Europe/Paris"` },
    ]);
  });

  it.each(['UTC', 'Europe/Paris', 'America/New_York', 'Asia/Kolkata'])('accepts the time zone %s', (tz) => {
    expect(parseDag(dag('', `timezone: ${tz}\nschedule: "0 9 * * *"\n`), FILE).timezone).toBe(tz);
  });
});

describe('parseDag: the task graph', () => {
  it('reports a duplicate task id, pointing at the first definition', () => {
    expect(issuesOf(tasks('{id: a, command: x}', '{id: b, command: x}', '{id: a, command: y}'))).toEqual([
      { path: 'tasks[2].id', message: 'duplicate task id "a" (first defined at tasks[0])' },
    ]);
  });

  it('reports an unknown dependency, naming the task, with a suggestion when one is close', () => {
    expect(
      issuesOf(tasks('{id: extract, command: x}', '{id: load, command: x, depends_on: [extarct, Extract, zzz]}')),
    ).toEqual([
      {
        path: 'tasks[1].depends_on[0]',
        message: 'task "load" depends on unknown task "extarct" (did you mean "extract"?)',
      },
      {
        path: 'tasks[1].depends_on[1]',
        message: 'task "load" depends on unknown task "Extract" (did you mean "extract"?)',
      },
      { path: 'tasks[1].depends_on[2]', message: 'task "load" depends on unknown task "zzz"' },
    ]);
  });

  it('reports a task depending on itself, and not also as a cycle', () => {
    expect(issuesOf(tasks('{id: a, command: x, depends_on: [a]}'))).toEqual([
      { path: 'tasks[0].depends_on[0]', message: 'task "a" depends on itself' },
    ]);
  });

  it('reports a duplicate dependency', () => {
    expect(issuesOf(tasks('{id: a, command: x}', '{id: b, command: x, depends_on: [a, a]}'))).toEqual([
      { path: 'tasks[1].depends_on[1]', message: 'duplicate dependency "a"' },
    ]);
  });

  it('does not repeat an invalid task id as an unknown dependency', () => {
    expect(issuesOf(tasks('{id: "a/b", command: x}', '{id: c, command: x, depends_on: ["a/b"]}'))).toEqual([
      {
        path: 'tasks[0].id',
        message: 'expected an id of 1-100 letters, digits, "_", "." or "-", starting with a letter or digit, got "a/b"',
      },
    ]);
  });

  it('rejects a dependency that is not a string', () => {
    expect(issuesOf(tasks('{id: a, command: x, depends_on: [1]}'))).toEqual([
      { path: 'tasks[0].depends_on[0]', message: 'expected a task id, got 1' },
    ]);
  });

  it('names a cycle in run order, starting at the task defined first', () => {
    // b runs after a, c after b, a after c.
    expect(
      issuesOf(
        tasks(
          '{id: a, command: x, depends_on: [c]}',
          '{id: b, command: x, depends_on: [a]}',
          '{id: c, command: x, depends_on: [b]}',
        ),
      ),
    ).toEqual([{ path: 'tasks[0].depends_on[0]', message: 'cycle: a → b → c → a' }]);
    // The same cycle, written in another order, starts at the task defined first.
    expect(
      issuesOf(
        tasks(
          '{id: c, command: x, depends_on: [b]}',
          '{id: a, command: x, depends_on: [c]}',
          '{id: b, command: x, depends_on: [a]}',
        ),
      ),
    ).toEqual([{ path: 'tasks[0].depends_on[0]', message: 'cycle: c → a → b → c' }]);
  });

  it('reports each distinct cycle once', () => {
    const issues = issuesOf(
      tasks(
        // A figure eight through a (a → b → a and a → f → a), and a separate c → d → e → c.
        '{id: a, command: x, depends_on: [b, f]}',
        '{id: b, command: x, depends_on: [a]}',
        '{id: ok, command: x, depends_on: [a]}',
        '{id: c, command: x, depends_on: [e]}',
        '{id: d, command: x, depends_on: [c]}',
        '{id: e, command: x, depends_on: [d]}',
        '{id: f, command: x, depends_on: [a]}',
      ),
    );
    expect(issues).toEqual([
      { path: 'tasks[0].depends_on[0]', message: 'cycle: a → b → a' },
      { path: 'tasks[0].depends_on[1]', message: 'cycle: a → f → a' },
      { path: 'tasks[3].depends_on[0]', message: 'cycle: c → d → e → c' },
    ]);
  });

  it('finds a cycle through 10,000 tasks without overflowing the stack', () => {
    const lines = Array.from(
      { length: 10_000 },
      (_, i) => `{id: t${i}, command: x, depends_on: [t${(i + 9_999) % 10_000}]}`,
    );
    const issues = issuesOf(tasks(...lines));
    expect(issues).toHaveLength(1);
    expect(issues[0]?.path).toBe('tasks[0].depends_on[0]');
    const names = issues[0]?.message.replace(/^cycle: /, '').split(' → ');
    expect(names).toHaveLength(10_001);
    expect(names?.slice(0, 3)).toEqual(['t0', 't1', 't2']);
    expect(names?.slice(-2)).toEqual(['t9999', 't0']);
  });

  it('still reports graph problems alongside field problems', () => {
    expect(
      issuesOf(
        tasks('{id: a, command: x, retries: -1, depends_on: [b]}', '{id: b, command: x, depends_on: [a, nope]}'),
      ),
    ).toEqual([
      { path: 'tasks[0].retries', message: 'expected an integer from 0 to 100, got -1' },
      { path: 'tasks[1].depends_on[1]', message: 'task "b" depends on unknown task "nope"' },
      { path: 'tasks[0].depends_on[0]', message: 'cycle: a → b → a' },
    ]);
  });
});

describe('timeout bound', () => {
  it('refuses a timeout longer than a Node timer can hold', async () => {
    const { parseDag } = await import('../../src/core/dag/parse-dag.js');
    expect(() => parseDag('dag_id: d\ntasks:\n  - id: a\n    command: ["true"]\n    timeout: 25d\n', 'd.yaml')).toThrow(
      /tasks\[0\]\.timeout: must be at most 24d \(leave timeout out for no timeout\), got "25d"/,
    );
    expect(
      parseDag('dag_id: d\ntasks:\n  - id: a\n    command: ["true"]\n    timeout: 24d\n', 'd.yaml').tasks[0]!.timeoutMs,
    ).toBe(24 * 86_400_000);
  });
});

describe('parseDag: the kubernetes block', () => {
  it("reads DESIGN.md's example, keeping only the fields given", () => {
    const spec = parseDag(
      dag(`executor: kubernetes
kubernetes:
  image: ghcr.io/acme/train:1.4
  resources: { requests: { cpu: "2", memory: 4Gi }, limits: { memory: 8Gi, nvidia.com/gpu: 1 } }
  namespace: ml
  service_account: trainer
  node_selector: { pool: gpu, kubernetes.io/arch: amd64 }
  tolerations: [{ key: gpu, operator: Exists, effect: NoSchedule }, { key: spot, value: "true", effect: NoExecute, toleration_seconds: 30 }]`),
      FILE,
    );
    expect(spec.tasks[0]!.kubernetes).toEqual({
      image: 'ghcr.io/acme/train:1.4',
      resources: { requests: { cpu: '2', memory: '4Gi' }, limits: { memory: '8Gi', 'nvidia.com/gpu': '1' } },
      namespace: 'ml',
      serviceAccount: 'trainer',
      nodeSelector: { pool: 'gpu', 'kubernetes.io/arch': 'amd64' },
      tolerations: [
        { key: 'gpu', operator: 'Exists', effect: 'NoSchedule' },
        { key: 'spot', value: 'true', effect: 'NoExecute', tolerationSeconds: 30 },
      ],
    });
    expect(parseDag(dag('kubernetes: { namespace: ml }'), FILE).tasks[0]!.kubernetes).toEqual({ namespace: 'ml' });
  });

  it('leaves the field out of a task without the block (its spec and hash unchanged)', () => {
    expect(Object.hasOwn(parseDag(dag(''), FILE).tasks[0]!, 'kubernetes')).toBe(false);
    expect(Object.hasOwn(parseDag(dag('kubernetes: null'), FILE).tasks[0]!, 'kubernetes')).toBe(false);
  });

  it.each([
    [
      'kubernetes: gpu',
      'tasks[0].kubernetes',
      'expected a kubernetes mapping (image, resources, namespace, service_account, node_selector, tolerations, pod_template), got "gpu"',
    ],
    [
      'kubernetes: { imag: x }',
      'tasks[0].kubernetes.imag',
      'unknown key "imag" (did you mean "image"?); allowed keys: image, resources, namespace, service_account, node_selector, tolerations, pod_template',
    ],
    [
      'kubernetes: { image: "a b" }',
      'tasks[0].kubernetes.image',
      'must be an image reference without spaces, got "a b"',
    ],
    [
      'kubernetes: { namespace: ML }',
      'tasks[0].kubernetes.namespace',
      'must be a DNS-1123 label: lower-case letters, digits and "-", starting and ending with a letter or digit, got "ML"',
    ],
    [
      'kubernetes: { service_account: "a_b" }',
      'tasks[0].kubernetes.service_account',
      'must be a DNS-1123 subdomain: lower-case letters, digits, "-" and ".", starting and ending with a letter or digit, got "a_b"',
    ],
    [
      'kubernetes: { resources: { requests: { cpu: 2x } } }',
      'tasks[0].kubernetes.resources.requests.cpu',
      'expected a resource quantity such as 500m, 2, 512Mi or 4Gi, got "2x"',
    ],
    [
      'kubernetes: { resources: { requests: { memory: -1Gi } } }',
      'tasks[0].kubernetes.resources.requests.memory',
      'expected a resource quantity such as 500m, 2, 512Mi or 4Gi, got "-1Gi"',
    ],
    [
      'kubernetes: { resources: { request: { cpu: "1" } } }',
      'tasks[0].kubernetes.resources.request',
      'unknown key "request" (did you mean "requests"?); allowed keys: requests, limits',
    ],
    [
      'kubernetes: { resources: { requests: { memory: 2Gi }, limits: { memory: 1Gi } } }',
      'tasks[0].kubernetes.resources.requests.memory',
      'request 2Gi is above its limit 1Gi',
    ],
    [
      'kubernetes: { node_selector: { "-pool": gpu } }',
      'tasks[0].kubernetes.node_selector["-pool"]',
      'invalid label key "-pool": name part must be letters, digits, "-", "_" and ".", starting and ending with a letter or digit',
    ],
    [
      'kubernetes: { node_selector: { "Acme.io/pool": gpu } }',
      'tasks[0].kubernetes.node_selector["Acme.io/pool"]',
      'invalid label key "Acme.io/pool": prefix "Acme.io" must be a DNS-1123 subdomain: lower-case letters, digits, "-" and ".", starting and ending with a letter or digit',
    ],
    [
      'kubernetes: { node_selector: { pool: "a b" } }',
      'tasks[0].kubernetes.node_selector.pool',
      'invalid label value "a b": must be letters, digits, "-", "_" and ".", starting and ending with a letter or digit',
    ],
    [
      'kubernetes: { node_selector: { pool: 1 } }',
      'tasks[0].kubernetes.node_selector.pool',
      'expected a string, got 1 (quote it: "1")',
    ],
    [
      'kubernetes: { tolerations: { key: gpu } }',
      'tasks[0].kubernetes.tolerations',
      'expected a list of tolerations, got a mapping',
    ],
    [
      'kubernetes: { tolerations: [{ key: gpu, effect: NoSchedul }] }',
      'tasks[0].kubernetes.tolerations[0].effect',
      'expected one of NoSchedule, PreferNoSchedule, NoExecute, got "NoSchedul" (did you mean "NoSchedule"?)',
    ],
    [
      'kubernetes: { tolerations: [{ key: gpu, operator: Exists, value: x }] }',
      'tasks[0].kubernetes.tolerations[0].value',
      'must be empty when operator is Exists',
    ],
    [
      'kubernetes: { tolerations: [{ key: gpu, effect: NoSchedule, toleration_seconds: 5 }] }',
      'tasks[0].kubernetes.tolerations[0].toleration_seconds',
      'is only allowed with effect NoExecute',
    ],
    [
      'kubernetes: { tolerations: [{ key: gpu, tolerate: 5 }] }',
      'tasks[0].kubernetes.tolerations[0].tolerate',
      'unknown key "tolerate"; allowed keys: key, operator, value, effect, toleration_seconds',
    ],
  ])('rejects a bad kubernetes field: %s', (line, path, message) => {
    expect(issuesOf(dag(line))).toEqual([{ path, message }]);
  });
});
