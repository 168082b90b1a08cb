/**
 * DAG file sources and the parser's expected messages, shared by the parseDag tests
 * (test/unit/parse-dag-*.test.ts).
 */
import { expect } from 'vitest';

import { DagValidationError, type DagIssue, type TaskDefinition } from '../../src/core/dag-spec.js';
import { parseDag } from '../../src/core/dag/parse-dag.js';

export const FILE = 'dags/test.yaml';

/** The issues parseDag reports for `source`; fails the test if it does not throw one DagValidationError. */
export function issuesOf(source: string): DagIssue[] {
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
export function dag(task = '', extra = ''): string {
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
export function tasks(...lines: string[]): string {
  return `dag_id: t\ntasks:\n${lines.map((l) => `  - ${l}\n`).join('')}`;
}

export const TASK_DEFAULTS: Omit<TaskDefinition, 'id' | 'command'> = {
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

export const DAG_KEYS =
  'dag_id, description, schedule, timezone, catchup, start_date, max_active_runs, priority, tags, triggers, notify, deadline, tasks';
export const TASK_KEYS =
  'id, command, depends_on, trigger_rule, retries, retry_delay, max_retry_delay, timeout, deadline, env, cwd, ' +
  'executor, image, placement, priority, kubernetes, wait, approval, output, inputs, cache, map';
export const PLACEMENT_KEYS = 'labels, capabilities, allowed_agents, forbidden_agents, max_parallel_per_agent';
export const DURATION = 'expected a duration like "30s", "5m" or "1h30m"';
