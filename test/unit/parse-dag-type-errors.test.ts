/** parseDag on values of the wrong type or out of range, each reported at its path. */
import { describe, expect, it } from 'vitest';

import { DagValidationError } from '../../src/core/dag-spec.js';
import { parseDag } from '../../src/core/dag/parse-dag.js';
import { DURATION, FILE, TASK_KEYS, dag, issuesOf, tasks } from '../helpers/dag-sources.js';

describe('parseDag: type errors', () => {
  const ID_RULE = 'an id of 1-100 letters, digits, "_", "." or "-", starting with a letter or digit';
  const COMMAND_RULE = 'expected a non-empty list of strings (argv) or a non-empty shell command string';
  const DATE_RULE = 'expected an ISO 8601 date or date-time like "2024-01-01" or "2024-01-01T06:00:00Z"';
  const TRIGGER_RULE = 'expected one of all_success, all_done, one_success, one_failed, none_failed';
  const EXECUTOR_RULE = 'expected one of default, subprocess, kubernetes, agents';
  const ENV_NAME_RULE = 'expected letters, digits and "_", not starting with a digit';

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
    ['start_date: 2024-13-01', 'start_date', `"2024-13-01" is not a valid date or time; ${DATE_RULE}`],
    ['start_date: 2023-02-29', 'start_date', `"2023-02-29" is not a valid date or time; ${DATE_RULE}`],
    ['start_date: 2024-01-01T24:00', 'start_date', `"2024-01-01T24:00" is not a valid date or time; ${DATE_RULE}`],
    ['start_date: yesterday', 'start_date', `${DATE_RULE}, got "yesterday"`],
    ['start_date: 1704067200', 'start_date', `${DATE_RULE}, got 1704067200`],
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
      `${TRIGGER_RULE}, got "all_sucess" (did you mean "all_success"?)`,
    ],
    ['trigger_rule: always', 'tasks[0].trigger_rule', `${TRIGGER_RULE}, got "always"`],
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
    ['env: { 1X: "a" }', 'tasks[0].env["1X"]', `invalid environment variable name "1X": ${ENV_NAME_RULE}`],
    ['env: { MY-VAR: "a" }', 'tasks[0].env.MY-VAR', `invalid environment variable name "MY-VAR": ${ENV_NAME_RULE}`],
    ['cwd: ""', 'tasks[0].cwd', 'expected a non-empty string, got ""'],
    ['cwd: 5', 'tasks[0].cwd', 'expected a non-empty string, got 5'],
    ['executor: k8s', 'tasks[0].executor', `${EXECUTOR_RULE}, got "k8s"`],
    ['executor: agent', 'tasks[0].executor', `${EXECUTOR_RULE}, got "agent" (did you mean "agents"?)`],
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
    ['command: ""', 'tasks[0].command', `${COMMAND_RULE}, got ""`],
    ['command: "   "', 'tasks[0].command', `${COMMAND_RULE}, got "   "`],
    ['command: []', 'tasks[0].command', `${COMMAND_RULE}, got an empty list`],
    ['command: 5', 'tasks[0].command', `${COMMAND_RULE}, got 5`],
    ['command: { run: x }', 'tasks[0].command', `${COMMAND_RULE}, got a mapping`],
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
