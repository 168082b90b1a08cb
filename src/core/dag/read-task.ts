/**
 * One entry of `tasks`: its fields read in file order, then the checks within the task
 * (required keys, retry delays, self-dependencies), then the defaults filled in. What a task
 * refers to outside itself is checked later, across tasks, in `check-task-graph.ts`.
 */
import { EXECUTOR_KINDS, PRIORITY_RANGE, TRIGGER_RULES, type DagIssue, type TaskDefinition } from '../dag-spec.js';
import { formatDuration } from '../duration.js';
import { placementExecutorIssues } from './check-placement-executor.js';
import { secretExecutorIssues } from './check-secret-executor.js';
import { isMapping, readDuration, readEnum, readId, readInteger, readString } from './field-readers.js';
import { describe, expected, keyPath, missing, unknownKey } from './issue-messages.js';
import { readDeadline } from './read-deadline.js';
import { readEnv, type TaskEnv } from './read-env.js';
import { readKubernetes } from './read-kubernetes.js';
import { readPlacement } from './read-placement.js';
import { COMMAND_ONLY_KEYS, readApproval, readWait } from './read-wait.js';
import { readInputs } from './read-inputs.js';
import { inputRefs } from '../match-inputs.js';
import { readCache } from './read-cache.js';
import { parseInputRef } from '../task-inputs.js';
import { mapSpecOf, readMap, type MapDraft } from './read-map.js';

/** Timers in Node hold at most 2^31−1 ms (~24.8 days); a longer one would fire at once. */
export const MAX_TIMEOUT_MS = 24 * 86_400_000;

const DEFAULT_RETRY_DELAY_MS = 10_000;
const DEFAULT_MAX_RETRY_DELAY_MS = 3_600_000;

const TASK_KEYS = [
  'id',
  'command',
  'depends_on',
  'trigger_rule',
  'retries',
  'retry_delay',
  'max_retry_delay',
  'timeout',
  'deadline',
  'env',
  'cwd',
  'executor',
  'image',
  'placement',
  'priority',
  'kubernetes',
  'wait',
  'approval',
  'output',
  'inputs',
  'cache',
  'map',
] as const;

const OUTPUT_MODES = ['required', 'optional'] as const;

/** A task as read, before the checks across tasks: what they need, and the spec if it is whole. */
export interface TaskDraft {
  index: number;
  id: string | undefined;
  /** A string id that failed validation: already reported, so references to it are not. */
  invalidId: string | undefined;
  /** Valid, distinct, non-self dependencies with the path of their entry. */
  deps: { id: string; path: string }[];
  spec: TaskDefinition | undefined;
}

/** Reads the task at `tasks[index]`; `spec` is set only when its id and command could be read. */
export function readTask(item: unknown, index: number, path: string, issues: DagIssue[]): TaskDraft {
  const draft: TaskDraft = { index, id: undefined, invalidId: undefined, deps: [], spec: undefined };
  if (!isMapping(item)) {
    issues.push(expected('a task mapping with at least id and command', item, path));
    return draft;
  }
  const task: Partial<TaskDefinition> = {};
  let taskEnv: TaskEnv | undefined;
  let maxRetryDelayPath = '';
  let inputsPath = '';
  let cachePath = '';
  let mapDraft: MapDraft | undefined;
  for (const [key, value] of Object.entries(item)) {
    const p = keyPath(path, key);
    switch (key) {
      case 'id':
        task.id = draft.id = readId(value, p, issues);
        if (draft.id === undefined && typeof value === 'string') draft.invalidId = value;
        break;
      case 'command':
        task.command = readCommand(value, p, issues);
        break;
      case 'depends_on':
        draft.deps = readDependsOn(value, p, issues);
        break;
      case 'trigger_rule':
        task.triggerRule = readEnum(value, p, TRIGGER_RULES, issues);
        break;
      case 'retries':
        task.retries = readInteger(value, p, 0, 100, issues);
        break;
      case 'retry_delay':
        task.retryDelayMs = readDuration(value, p, issues);
        break;
      case 'max_retry_delay':
        task.maxRetryDelayMs = readDuration(value, p, issues);
        maxRetryDelayPath = p;
        break;
      case 'timeout':
        task.timeoutMs = value === null ? null : readTimeout(value, p, issues);
        break;
      case 'deadline':
        task.deadlineMs = readDeadline(value, p, issues);
        break;
      case 'env':
        taskEnv = readEnv(value, p, issues);
        break;
      case 'cwd':
        task.cwd = value === null ? null : readString(value, p, issues, { nonEmpty: true, noNul: true });
        break;
      case 'executor':
        task.executor = readEnum(value, p, EXECUTOR_KINDS, issues);
        break;
      case 'image':
        task.image = value === null ? null : readString(value, p, issues, { nonEmpty: true });
        break;
      case 'placement':
        task.placement = value === null ? null : readPlacement(value, p, issues);
        break;
      case 'priority':
        task.priority = readInteger(value, p, PRIORITY_RANGE.min, PRIORITY_RANGE.max, issues);
        break;
      case 'kubernetes':
        if (value !== null) task.kubernetes = readKubernetes(value, p, issues);
        break;
      case 'wait':
        task.wait = readWait(value, p, issues);
        break;
      case 'approval':
        task.approval = readApproval(value, p, issues);
        break;
      case 'output':
        if (readEnum(value, p, OUTPUT_MODES, issues) === 'required') task.output = 'required';
        break;
      case 'inputs':
        inputsPath = p;
        if (value !== null) task.inputs = readInputs(value, p, issues);
        break;
      case 'cache':
        cachePath = p;
        if (value !== null) task.cache = readCache(value, p, issues);
        break;
      case 'map':
        mapDraft = readMap(value, p, issues);
        break;
      default:
        issues.push(unknownKey(key, p, TASK_KEYS));
    }
  }
  if (!Object.hasOwn(item, 'id')) issues.push(missing('id', `${path}.id`));
  // A task runs a command, or waits for an event, or for an approval: exactly one of the three.
  const kinds = (['command', 'wait', 'approval'] as const).filter((k) => Object.hasOwn(item, k));
  const waits = kinds.includes('wait') || kinds.includes('approval');
  if (kinds.length === 0) issues.push(missing('command', `${path}.command`));
  else if (kinds.length > 1) {
    issues.push({
      path: `${path}.${kinds[1]}`,
      message: `a task has exactly one of command, wait and approval; this one has ${kinds.join(' and ')}`,
    });
  } else if (waits) {
    for (const key of COMMAND_ONLY_KEYS) {
      if (key !== 'command' && Object.hasOwn(item, key))
        issues.push({
          path: `${path}.${key}`,
          message: `only a task with a command may have "${key}"; this one has ${kinds[0]}`,
        });
    }
  }

  const retryDelayMs = task.retryDelayMs ?? DEFAULT_RETRY_DELAY_MS;
  // A long retry_delay raises the default cap instead of contradicting it.
  const maxRetryDelayMs = task.maxRetryDelayMs ?? Math.max(DEFAULT_MAX_RETRY_DELAY_MS, retryDelayMs);
  const retryDelayValid = !Object.hasOwn(item, 'retry_delay') || task.retryDelayMs !== undefined;
  if (task.maxRetryDelayMs !== undefined && retryDelayValid && maxRetryDelayMs < retryDelayMs) {
    issues.push({
      path: maxRetryDelayPath,
      message: `must be at least retry_delay (${formatDuration(retryDelayMs)}), got ${formatDuration(maxRetryDelayMs)}`,
    });
  }
  issues.push(...placementExecutorIssues(task, path, task.executor ?? 'default'));
  if (draft.id !== undefined) {
    // Self-dependencies are reported here, with the task, and kept out of the graph checks.
    draft.deps = draft.deps.filter((dep) => {
      if (dep.id !== draft.id) return true;
      issues.push({ path: dep.path, message: `task "${dep.id}" depends on itself` });
      return false;
    });
  }
  // A wait's `$inputs.TASK.PATH` match values name upstream tasks, as `inputs:` entries do.
  for (const [key, want] of Object.entries(task.wait?.match ?? {})) {
    for (const ref of inputRefs({ [key]: want })) {
      const upstream = parseInputRef(
        ref,
        draft.deps.map((d) => d.id),
      ).task;
      if (draft.deps.some((d) => d.id === upstream)) continue;
      issues.push({
        path: keyPath(keyPath(keyPath(path, 'wait'), 'match'), key),
        message:
          `"$inputs.${ref}" names task "${upstream}", which is not in depends_on: ` +
          'an input comes from an upstream task',
      });
    }
  }
  for (const [name, ref] of Object.entries(task.inputs ?? {})) {
    const upstream = parseInputRef(
      ref,
      draft.deps.map((d) => d.id),
    ).task;
    if (!draft.deps.some((d) => d.id === upstream)) {
      issues.push({
        path: keyPath(inputsPath, name),
        message: `"${ref}" names task "${upstream}", which is not in depends_on: an input comes from an upstream task`,
      });
    }
    if (taskEnv?.env && Object.hasOwn(taskEnv.env, name)) {
      issues.push({ path: keyPath(inputsPath, name), message: `"${name}" is set in env too: give it one source` });
    }
  }
  for (const ref of task.cache?.key ?? []) {
    if (!ref.startsWith('inputs.')) continue;
    const deps = draft.deps.map((d) => d.id);
    const upstream = parseInputRef(ref.slice('inputs.'.length), deps).task;
    if (!deps.includes(upstream)) {
      issues.push({
        path: `${cachePath}.key`,
        message: `"${ref}" names task "${upstream}", which is not in depends_on: a key's input comes from an upstream`,
      });
    }
  }
  if (mapDraft) {
    const ref = parseInputRef(
      mapDraft.over,
      draft.deps.map((d) => d.id),
    );
    if (!draft.deps.some((d) => d.id === ref.task)) {
      issues.push({
        path: mapDraft.overPath,
        message:
          `"${mapDraft.over}" names task "${ref.task}", which is not in depends_on: ` +
          "a map is over an upstream's output",
      });
    } else if (waits) {
      issues.push({
        path: `${path}.map`,
        message: `only a task with a command may have "map"; this one has ${kinds[0]}`,
      });
    } else task.map = mapSpecOf(mapDraft, ref.task, ref.path);
    // A cache key is made of the run's conf and the task's inputs, which every item shares: the
    // items would take one another's result.
    if (task.cache !== undefined)
      issues.push({
        path: cachePath,
        message: 'a task with "map" may not have "cache": its items share the conf and inputs a key is made of',
      });
  }
  const executor = task.executor ?? 'default';
  issues.push(...secretExecutorIssues({ secretEnv: taskEnv?.secretEnv }, path, executor));
  if (task.id === undefined) return draft;
  if (waits ? task.wait === undefined && task.approval === undefined : task.command === undefined) return draft;
  draft.spec = {
    id: task.id,
    command: task.command ?? [],
    dependsOn: draft.deps.map((d) => d.id),
    triggerRule: task.triggerRule ?? 'all_success',
    retries: task.retries ?? 0,
    retryDelayMs,
    maxRetryDelayMs,
    timeoutMs: task.timeoutMs ?? null,
    ...(task.deadlineMs !== undefined ? { deadlineMs: task.deadlineMs } : {}),
    env: taskEnv?.env ?? {},
    ...(taskEnv?.secretEnv !== undefined ? { secretEnv: taskEnv.secretEnv } : {}),
    cwd: task.cwd ?? null,
    executor,
    image: task.image ?? null,
    placement: task.placement ?? null,
    ...(task.priority !== undefined ? { priority: task.priority } : {}),
    ...(task.kubernetes !== undefined ? { kubernetes: task.kubernetes } : {}),
    ...(task.wait !== undefined ? { wait: task.wait } : {}),
    ...(task.approval !== undefined ? { approval: task.approval } : {}),
    ...(task.output !== undefined ? { output: task.output } : {}),
    ...(task.inputs !== undefined && Object.keys(task.inputs).length > 0 ? { inputs: task.inputs } : {}),
    ...(task.cache !== undefined ? { cache: task.cache } : {}),
    ...(task.map !== undefined ? { map: task.map } : {}),
  };
  return draft;
}

function readCommand(value: unknown, path: string, issues: DagIssue[]): string[] | undefined {
  const what = 'a non-empty list of strings (argv) or a non-empty shell command string';
  if (typeof value === 'string') {
    if (value.trim() === '') issues.push(expected(what, value, path));
    else if (value.includes('\0')) issues.push({ path, message: 'must not contain a NUL character' });
    else return ['sh', '-c', value];
    return undefined;
  }
  if (!Array.isArray(value) || value.length === 0) {
    issues.push(expected(what, value, path));
    return undefined;
  }
  const before = issues.length;
  const argv = value.map((arg, i) =>
    readString(arg, `${path}[${i}]`, issues, { nonEmpty: i === 0, noNul: true, quoteHint: true }),
  );
  if (issues.length > before) return undefined;
  return argv.filter((a): a is string => a !== undefined);
}

function readDependsOn(value: unknown, path: string, issues: DagIssue[]): TaskDraft['deps'] {
  if (!Array.isArray(value)) {
    issues.push(expected('a list of task ids', value, path));
    return [];
  }
  const deps: TaskDraft['deps'] = [];
  const seen = new Set<string>();
  value.forEach((dep, i) => {
    const p = `${path}[${i}]`;
    if (typeof dep !== 'string') issues.push(expected('a task id', dep, p));
    else if (seen.has(dep)) issues.push({ path: p, message: `duplicate dependency "${dep}"` });
    else {
      seen.add(dep);
      deps.push({ id: dep, path: p });
    }
  });
  return deps;
}

function readTimeout(value: unknown, path: string, issues: DagIssue[]): number | undefined {
  const ms = readDuration(value, path, issues);
  if (ms === 0) {
    issues.push({ path, message: `must be greater than 0 (leave timeout out for no timeout), got ${describe(value)}` });
    return undefined;
  }
  if (ms !== undefined && ms > MAX_TIMEOUT_MS) {
    issues.push({ path, message: `must be at most 24d (leave timeout out for no timeout), got ${describe(value)}` });
    return undefined;
  }
  return ms;
}
