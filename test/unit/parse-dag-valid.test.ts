/** parseDag on valid files: what a spec holds, with its defaults. */
import { readFileSync } from 'node:fs';

import { describe, expect, it } from 'vitest';

import { parseDag } from '../../src/core/dag/parse-dag.js';
import { FILE, TASK_DEFAULTS, dag, issuesOf, tasks } from '../helpers/dag-sources.js';

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
