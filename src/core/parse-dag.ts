import { CronExpressionParser } from 'cron-parser';
import { parseDocument } from 'yaml';

import {
  DagValidationError,
  EXECUTOR_KINDS,
  TRIGGER_RULES,
  type DagIssue,
  type DagSpec,
  type ExecutorKind,
  type PlacementSpec,
  type TaskSpec,
  type TriggerRule,
} from './dag-spec.js';
import { formatDuration, parseDuration } from './duration.js';

/** A DAG file larger than this is rejected before it is parsed. */
export const MAX_DAG_SOURCE_BYTES = 1024 * 1024;
/** At most this many tasks in one DAG. */
export const MAX_DAG_TASKS = 10_000;

/** Low on purpose: a legitimate DAG file needs few aliases; a "billion laughs" file needs many. */
const MAX_ALIAS_COUNT = 100;
/** Past the first few, YAML errors are mostly echoes of the first one. */
const MAX_YAML_ISSUES = 20;
/** One cycle per DFS back edge can still be many in a hostile file; the first ones suffice. */
const MAX_CYCLE_ISSUES = 100;
/** Budget of id comparisons for "did you mean" suggestions, so 10,000 bad references stay cheap. */
const SUGGESTION_BUDGET = 200_000;
/** Keeps `max_active_runs` and friends inside a Postgres `integer`. */
const MAX_INT4 = 2_147_483_647;

const ID_PATTERN = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$/;
const ID_RULE = 'an id of 1-100 letters, digits, "_", "." or "-", starting with a letter or digit';
const ENV_NAME_PATTERN = /^[A-Za-z_][A-Za-z0-9_]*$/;
const CRON_PRESETS = ['@hourly', '@daily', '@weekly', '@monthly', '@yearly'];
/** Jenkins-style `H` picks a random value per parse; replicas would disagree on the schedule. */
const CRON_HASH = /(?<![A-Za-z])[Hh](?![A-Za-z])/;
const ISO_DATE_TIME =
  /^(\d{4})-(\d{2})-(\d{2})(?:[Tt ](\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?(Z|z|[+-]\d{2}(?::?\d{2})?)?)?$/;

const DEFAULT_TIMEZONE = 'UTC';
const DEFAULT_MAX_ACTIVE_RUNS = 16;
const DEFAULT_RETRY_DELAY_MS = 10_000;
const DEFAULT_MAX_RETRY_DELAY_MS = 3_600_000;

const DAG_KEYS = [
  'dag_id', 'description', 'schedule', 'timezone', 'catchup', 'start_date', 'max_active_runs', 'tags', 'tasks',
] as const;
const TASK_KEYS = [
  'id', 'command', 'depends_on', 'trigger_rule', 'retries', 'retry_delay', 'max_retry_delay', 'timeout', 'env',
  'cwd', 'executor', 'image', 'placement',
] as const;
const PLACEMENT_KEYS = [
  'labels', 'capabilities', 'allowed_agents', 'forbidden_agents', 'max_parallel_per_agent',
] as const;

/**
 * Parses and validates a DAG file (YAML 1.2 or JSON) into its normalized spec.
 *
 * Validation is total: every problem is collected, with the path of the field, and thrown as one
 * {@link DagValidationError}; a partial spec is never returned. Issues come in the order found:
 * YAML-level problems alone (nothing else is checked in a broken document), otherwise each field
 * in file order, then the checks across tasks (unknown dependencies, then cycles).
 *
 * Cycles are named in run order, upstream first, starting at the member defined first in the
 * file: `b depends_on [a]`, `c depends_on [b]`, `a depends_on [c]` gives `cycle: a → b → c → a`.
 * One cycle is reported per back edge of a depth-first search, so fixing every reported cycle
 * (removing the dependency the issue's path points at) leaves the graph acyclic.
 *
 * Pure: no I/O. `file` is only used to label the error.
 */
export function parseDag(source: string, file: string): DagSpec {
  const issues: DagIssue[] = [];
  const sizeIssue = checkDagSourceSize(source);
  if (sizeIssue !== null) throw new DagValidationError(file, [sizeIssue]);

  const root = loadYaml(source, issues);
  if (issues.length > 0) throw new DagValidationError(file, issues);

  const spec = readDag(root, issues);
  if (issues.length > 0 || spec === undefined) throw new DagValidationError(file, issues);
  return spec;
}

/**
 * The size check alone, so a caller can refuse an oversized file before copying it anywhere
 * (e.g. to a worker thread). Returns the issue `parseDag` would report, or null.
 */
export function checkDagSourceSize(source: string): DagIssue | null {
  // Every UTF-16 unit is at least one UTF-8 byte and at most three, so only count when unsure.
  const bytes = source.length * 3 <= MAX_DAG_SOURCE_BYTES ? 0 : utf8Length(source);
  if (bytes <= MAX_DAG_SOURCE_BYTES) return null;
  return {
    path: '',
    message: `the DAG file is ${bytes} bytes; the limit is ${MAX_DAG_SOURCE_BYTES} bytes (1 MiB)`,
  };
}

// ---------------------------------------------------------------------------------------------
// YAML

function loadYaml(source: string, issues: DagIssue[]): unknown {
  let doc;
  try {
    doc = parseDocument(source, {
      version: '1.2',
      uniqueKeys: true,
      stringKeys: true,
      // Only the core tags (str, int, float, bool, null, map, seq): `!!binary`, `!!set`,
      // `!!timestamp` would produce values no field accepts, so they are reported instead.
      resolveKnownTags: false,
      prettyErrors: true,
      logLevel: 'error', // no process warnings from a pure function; 'silent' would also drop MULTIPLE_DOCS
    });
  } catch (err) {
    issues.push({ path: '', message: `invalid YAML: ${firstLine(err)}` });
    return undefined;
  }
  const problems = [...doc.errors, ...doc.warnings];
  for (const problem of problems.slice(0, MAX_YAML_ISSUES)) {
    issues.push({ path: '', message: `invalid YAML: ${firstLine(problem)}` });
  }
  if (problems.length > MAX_YAML_ISSUES) {
    issues.push({ path: '', message: `invalid YAML: ${problems.length - MAX_YAML_ISSUES} more errors not shown` });
  }
  if (problems.length > 0) return undefined;
  try {
    return doc.toJS({ maxAliasCount: MAX_ALIAS_COUNT });
  } catch (err) {
    // The yaml package throws ReferenceError for an undefined alias and for an alias bomb.
    const reason = firstLine(err);
    const message = /resource exhaustion/.test(reason)
      ? `invalid YAML: too many alias expansions (limit ${MAX_ALIAS_COUNT}); the document looks like an alias bomb`
      : `invalid YAML: ${reason}`;
    issues.push({ path: '', message });
    return undefined;
  }
}

/** prettyErrors appends a code excerpt after the position; one line is enough for an issue. */
function firstLine(err: unknown): string {
  const message = err instanceof Error ? err.message : String(err);
  return (message.split('\n')[0] ?? '').replace(/:$/, '');
}

// ---------------------------------------------------------------------------------------------
// Top level

function readDag(root: unknown, issues: DagIssue[]): DagSpec | undefined {
  if (!isMapping(root)) {
    const message = root === null ? 'the file is empty; a DAG file needs at least dag_id and tasks' : `expected the document to be a mapping with at least dag_id and tasks, got ${describe(root)}`;
    issues.push({ path: '', message });
    return undefined;
  }
  // start_date and schedule are read in the DAG's time zone, wherever timezone sits in the file.
  const timezone = isTimezone(root.timezone) ? root.timezone : DEFAULT_TIMEZONE;
  const dag: Partial<DagSpec> = {};

  for (const [key, value] of Object.entries(root)) {
    const path = keyPath('', key);
    switch (key) {
      case 'dag_id':
        dag.dagId = readId(value, path, issues);
        break;
      case 'description':
        dag.description = readString(value, path, issues);
        break;
      case 'schedule':
        dag.schedule = value === null ? null : readSchedule(value, path, timezone, issues);
        break;
      case 'timezone':
        if (typeof value !== 'string') issues.push(expected('an IANA time zone like "Europe/Paris"', value, path));
        else if (!isTimezone(value)) {
          issues.push({ path, message: `unknown time zone ${describe(value)}; expected an IANA name like "Europe/Paris"` });
        } else dag.timezone = value;
        break;
      case 'catchup':
        dag.catchup = readBoolean(value, path, issues);
        break;
      case 'start_date':
        dag.startDate = value === null ? null : readStartDate(value, path, timezone, issues);
        break;
      case 'max_active_runs':
        dag.maxActiveRuns = readInteger(value, path, 1, MAX_INT4, issues);
        break;
      case 'tags':
        dag.tags = readStringList(value, path, issues, 'tag');
        break;
      case 'tasks':
        dag.tasks = readTasks(value, path, issues);
        break;
      default:
        issues.push(unknownKey(key, path, DAG_KEYS));
    }
  }
  if (!Object.hasOwn(root, 'dag_id')) issues.push(missing('dag_id', 'dag_id'));
  if (!Object.hasOwn(root, 'tasks')) issues.push(missing('tasks', 'tasks'));
  if (dag.dagId === undefined || dag.tasks === undefined) return undefined;

  return {
    dagId: dag.dagId,
    description: dag.description ?? '',
    schedule: dag.schedule ?? null,
    timezone: dag.timezone ?? DEFAULT_TIMEZONE,
    catchup: dag.catchup ?? false,
    startDate: dag.startDate ?? null,
    maxActiveRuns: dag.maxActiveRuns ?? DEFAULT_MAX_ACTIVE_RUNS,
    tags: dag.tags ?? [],
    tasks: dag.tasks,
  };
}

function readSchedule(value: unknown, path: string, timezone: string, issues: DagIssue[]): string | undefined {
  const what = `a cron expression like "*/5 * * * *" or one of ${CRON_PRESETS.join(', ')}`;
  if (typeof value !== 'string') {
    issues.push(expected(what, value, path));
    return undefined;
  }
  const trimmed = value.trim();
  if (trimmed.startsWith('@')) {
    if (CRON_PRESETS.includes(trimmed)) return trimmed;
    issues.push(expected(what, value, path, suggest(trimmed, CRON_PRESETS)));
    return undefined;
  }
  const fields = trimmed.split(/\s+/);
  if (trimmed === '' || fields.length < 5 || fields.length > 6) {
    const count = trimmed === '' ? 0 : fields.length;
    issues.push({
      path,
      message: `invalid cron expression ${describe(value)}: expected 5 fields (minute hour day-of-month month day-of-week) or 6 (with seconds first), got ${count}`,
    });
    return undefined;
  }
  if (CRON_HASH.test(trimmed)) {
    issues.push({ path, message: `invalid cron expression ${describe(value)}: "H" (hashed) values are not supported` });
    return undefined;
  }
  const expression = fields.join(' ');
  try {
    CronExpressionParser.parse(expression, { tz: timezone });
  } catch (err) {
    issues.push({ path, message: `invalid cron expression ${describe(value)}: ${firstLine(err)}` });
    return undefined;
  }
  return expression;
}

function readStartDate(value: unknown, path: string, timezone: string, issues: DagIssue[]): string | undefined {
  const what = 'an ISO 8601 date or date-time like "2024-01-01" or "2024-01-01T06:00:00Z"';
  const match = typeof value === 'string' ? ISO_DATE_TIME.exec(value) : null;
  if (match === null) {
    issues.push(expected(what, value, path));
    return undefined;
  }
  const [, y, mo, d, h = '0', mi = '0', s = '0', fraction = '', offset] = match;
  const fields = {
    year: Number(y), month: Number(mo), day: Number(d), hour: Number(h), minute: Number(mi), second: Number(s),
    ms: Number(fraction.padEnd(3, '0').slice(0, 3)),
  };
  // Day 0 of the next month is the last day of this one.
  const monthDays = new Date(Date.UTC(fields.year, fields.month, 0)).getUTCDate();
  if (
    fields.year < 1000 || fields.month < 1 || fields.month > 12 || fields.day < 1 || fields.day > monthDays ||
    fields.hour > 23 || fields.minute > 59 || fields.second > 59
  ) {
    issues.push({ path, message: `${describe(value)} is not a valid date or time; expected ${what}` });
    return undefined;
  }
  const wallClock = Date.UTC(
    fields.year, fields.month - 1, fields.day, fields.hour, fields.minute, fields.second, fields.ms,
  );
  // No offset in the file: the time is a wall-clock time in the DAG's time zone (UTC by default).
  const instant = offset === undefined ? zonedToInstant(wallClock, timezone) : wallClock - offsetMs(offset);
  return new Date(instant).toISOString();
}

// ---------------------------------------------------------------------------------------------
// Tasks

interface TaskDraft {
  index: number;
  id: string | undefined;
  /** A string id that failed validation: already reported, so references to it are not. */
  invalidId: string | undefined;
  /** Valid, distinct, non-self dependencies with the path of their entry. */
  deps: { id: string; path: string }[];
  spec: TaskSpec | undefined;
}

function readTasks(value: unknown, path: string, issues: DagIssue[]): TaskSpec[] | undefined {
  if (!Array.isArray(value) || value.length === 0) {
    issues.push(expected('a non-empty list of tasks', value, path));
    return undefined;
  }
  if (value.length > MAX_DAG_TASKS) {
    issues.push({ path, message: `too many tasks: ${value.length}; the limit is ${MAX_DAG_TASKS}` });
    return undefined;
  }
  const firstIndex = new Map<string, number>();
  const drafts: TaskDraft[] = value.map((item, index) => {
    const draft = readTask(item, index, `${path}[${index}]`, issues);
    if (draft.id !== undefined) {
      const first = firstIndex.get(draft.id);
      if (first === undefined) firstIndex.set(draft.id, index);
      else {
        issues.push({
          path: `${path}[${index}].id`,
          message: `duplicate task id "${draft.id}" (first defined at ${path}[${first}])`,
        });
      }
    }
    return draft;
  });
  checkDependencies(drafts, firstIndex, path, issues);
  checkCycles(drafts, firstIndex, path, issues);
  const specs = drafts.map((d) => d.spec);
  return specs.every((s): s is TaskSpec => s !== undefined) ? specs : undefined;
}

function readTask(item: unknown, index: number, path: string, issues: DagIssue[]): TaskDraft {
  const draft: TaskDraft = { index, id: undefined, invalidId: undefined, deps: [], spec: undefined };
  if (!isMapping(item)) {
    issues.push(expected('a task mapping with at least id and command', item, path));
    return draft;
  }
  const task: Partial<TaskSpec> = {};
  let maxRetryDelayPath = '';
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
      case 'env':
        task.env = readStringMap(value, p, issues, 'environment variable');
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
      default:
        issues.push(unknownKey(key, p, TASK_KEYS));
    }
  }
  if (!Object.hasOwn(item, 'id')) issues.push(missing('id', `${path}.id`));
  if (!Object.hasOwn(item, 'command')) issues.push(missing('command', `${path}.command`));

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
  if (draft.id !== undefined) {
    // Self-dependencies are reported here, with the task, and kept out of the graph checks.
    draft.deps = draft.deps.filter((dep) => {
      if (dep.id !== draft.id) return true;
      issues.push({ path: dep.path, message: `task "${dep.id}" depends on itself` });
      return false;
    });
  }
  if (task.id === undefined || task.command === undefined) return draft;
  draft.spec = {
    id: task.id,
    command: task.command,
    dependsOn: draft.deps.map((d) => d.id),
    triggerRule: task.triggerRule ?? 'all_success',
    retries: task.retries ?? 0,
    retryDelayMs,
    maxRetryDelayMs,
    timeoutMs: task.timeoutMs ?? null,
    env: task.env ?? {},
    cwd: task.cwd ?? null,
    executor: task.executor ?? 'default',
    image: task.image ?? null,
    placement: task.placement ?? null,
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

/** Timers in Node hold at most 2^31−1 ms (~24.8 days); a longer one would fire at once. */
export const MAX_TIMEOUT_MS = 24 * 86_400_000;

function readPlacement(value: unknown, path: string, issues: DagIssue[]): PlacementSpec | undefined {
  if (!isMapping(value)) {
    issues.push(expected('a placement mapping', value, path));
    return undefined;
  }
  const placement: Partial<PlacementSpec> = {};
  for (const [key, v] of Object.entries(value)) {
    const p = keyPath(path, key);
    switch (key) {
      case 'labels':
        placement.labels = readStringMap(v, p, issues, 'label');
        break;
      case 'capabilities':
        placement.capabilities = readStringList(v, p, issues, 'capability');
        break;
      case 'allowed_agents':
        placement.allowedAgents = readStringList(v, p, issues, 'agent id');
        break;
      case 'forbidden_agents':
        placement.forbiddenAgents = readStringList(v, p, issues, 'agent id');
        break;
      case 'max_parallel_per_agent':
        placement.maxParallelPerAgent = v === null ? null : readInteger(v, p, 1, MAX_INT4, issues);
        break;
      default:
        issues.push(unknownKey(key, p, PLACEMENT_KEYS));
    }
  }
  return {
    labels: placement.labels ?? {},
    capabilities: placement.capabilities ?? [],
    allowedAgents: placement.allowedAgents ?? [],
    forbiddenAgents: placement.forbiddenAgents ?? [],
    maxParallelPerAgent: placement.maxParallelPerAgent ?? null,
  };
}

// ---------------------------------------------------------------------------------------------
// Checks across tasks

function checkDependencies(
  drafts: TaskDraft[],
  firstIndex: Map<string, number>,
  path: string,
  issues: DagIssue[],
): void {
  const ids = [...firstIndex.keys()];
  const invalidIds = new Set(drafts.map((d) => d.invalidId));
  let budget = SUGGESTION_BUDGET;
  for (const draft of drafts) {
    for (const dep of draft.deps) {
      if (firstIndex.has(dep.id) || invalidIds.has(dep.id)) continue;
      let hint = '';
      if (budget >= ids.length) {
        budget -= ids.length;
        const close = suggest(dep.id, ids);
        if (close !== undefined) hint = ` (did you mean "${close}"?)`;
      }
      const who = draft.id === undefined ? `${path}[${draft.index}]` : `"${draft.id}"`;
      issues.push({ path: dep.path, message: `task ${who} depends on unknown task "${dep.id}"${hint}` });
    }
  }
}

/**
 * Iterative DFS along upstream → downstream edges (a task with 10,000 levels of dependencies
 * must not overflow the stack). Each back edge closes one cycle, made of the DFS path from its
 * target to its source; duplicate task ids (the later definitions) are left out of the graph.
 */
function checkCycles(drafts: TaskDraft[], firstIndex: Map<string, number>, path: string, issues: DagIssue[]): void {
  const n = drafts.length;
  const downstream: number[][] = drafts.map(() => []);
  /** Path of the depends_on entry for the edge `from → to`, keyed `${to}:${from}`. */
  const edgePath = new Map<string, string>();
  for (const draft of drafts) {
    if (draft.id === undefined || firstIndex.get(draft.id) !== draft.index) continue;
    for (const dep of draft.deps) {
      const from = firstIndex.get(dep.id);
      if (from === undefined) continue;
      downstream[from]?.push(draft.index);
      edgePath.set(`${draft.index}:${from}`, dep.path);
    }
  }

  const NEW = 0;
  const ON_PATH = 1;
  const DONE = 2;
  const state = new Uint8Array(n);
  const depth = new Int32Array(n);
  let found = 0;
  for (let root = 0; root < n; root++) {
    if (state[root] !== NEW) continue;
    const stack = [root];
    const cursor = [0];
    state[root] = ON_PATH;
    depth[root] = 0;
    while (stack.length > 0) {
      const top = stack.length - 1;
      const node = stack[top] as number;
      const next = (downstream[node] as number[])[cursor[top] as number];
      if (next === undefined) {
        state[node] = DONE;
        stack.pop();
        cursor.pop();
        continue;
      }
      cursor[top] = (cursor[top] as number) + 1;
      if (state[next] === NEW) {
        state[next] = ON_PATH;
        depth[next] = stack.length;
        stack.push(next);
        cursor.push(0);
      } else if (state[next] === ON_PATH) {
        found += 1;
        if (found <= MAX_CYCLE_ISSUES) issues.push(cycleIssue(stack.slice(depth[next]), drafts, edgePath, path));
      }
    }
  }
  if (found > MAX_CYCLE_ISSUES) {
    issues.push({ path, message: `${found - MAX_CYCLE_ISSUES} more cycles not shown` });
  }
}

function cycleIssue(members: number[], drafts: TaskDraft[], edgePath: Map<string, string>, path: string): DagIssue {
  // Start at the member defined first in the file, so the same cycle always reads the same.
  const start = members.indexOf(Math.min(...members));
  const ordered = [...members.slice(start), ...members.slice(0, start)];
  const names = ordered.map((i) => drafts[i]?.id ?? '?');
  const first = ordered[0] as number;
  const last = ordered[ordered.length - 1] as number;
  return {
    path: edgePath.get(`${first}:${last}`) ?? `${path}[${first}].depends_on`,
    message: `cycle: ${[...names, names[0]].join(' → ')}`,
  };
}

// ---------------------------------------------------------------------------------------------
// Field readers: each returns undefined (having recorded an issue) when the value is invalid.

function readId(value: unknown, path: string, issues: DagIssue[]): string | undefined {
  if (typeof value === 'string' && ID_PATTERN.test(value)) return value;
  issues.push(expected(ID_RULE, value, path));
  return undefined;
}

interface StringRules {
  nonEmpty?: boolean;
  noNul?: boolean;
  /** Numbers and booleans get a "quote it" hint: YAML read `8080` or `true` as a non-string. */
  quoteHint?: boolean;
}

function readString(value: unknown, path: string, issues: DagIssue[], rules: StringRules = {}): string | undefined {
  if (typeof value !== 'string') {
    const hint = rules.quoteHint && (typeof value === 'number' || typeof value === 'boolean')
      ? ` (quote it: "${String(value)}")`
      : '';
    issues.push({ path, message: `expected ${rules.nonEmpty ? 'a non-empty string' : 'a string'}, got ${describe(value)}${hint}` });
    return undefined;
  }
  if (rules.nonEmpty && value === '') {
    issues.push(expected('a non-empty string', value, path));
    return undefined;
  }
  if (rules.noNul && value.includes('\0')) {
    issues.push({ path, message: 'must not contain a NUL character' });
    return undefined;
  }
  return value;
}

function readBoolean(value: unknown, path: string, issues: DagIssue[]): boolean | undefined {
  if (typeof value === 'boolean') return value;
  issues.push(expected('true or false', value, path));
  return undefined;
}

function readInteger(value: unknown, path: string, min: number, max: number, issues: DagIssue[]): number | undefined {
  if (typeof value === 'number' && Number.isInteger(value) && value >= min && value <= max) return value;
  let what = `an integer from ${min} to ${max}`;
  if (min === 1 && max === MAX_INT4) {
    what = typeof value === 'number' && value > max ? `a positive integer no larger than ${max}` : 'a positive integer';
  }
  issues.push(expected(what, value, path));
  return undefined;
}

function readDuration(value: unknown, path: string, issues: DagIssue[]): number | undefined {
  try {
    return parseDuration(value);
  } catch (err) {
    issues.push({ path, message: err instanceof Error ? err.message : String(err) });
    return undefined;
  }
}

function readEnum<T extends string>(value: unknown, path: string, allowed: readonly T[], issues: DagIssue[]): T | undefined {
  if (typeof value === 'string' && (allowed as readonly string[]).includes(value)) return value as T;
  const hint = typeof value === 'string' ? suggest(value, allowed) : undefined;
  issues.push(expected(`one of ${allowed.join(', ')}`, value, path, hint));
  return undefined;
}

/** A list of distinct non-empty strings. */
function readStringList(value: unknown, path: string, issues: DagIssue[], what: string): string[] | undefined {
  if (!Array.isArray(value)) {
    issues.push(expected(`a list of ${what} strings`, value, path));
    return undefined;
  }
  const before = issues.length;
  const seen = new Set<string>();
  for (const [i, item] of value.entries()) {
    const p = `${path}[${i}]`;
    if (typeof item !== 'string' || item === '') issues.push(expected(`a non-empty ${what} string`, item, p));
    else if (seen.has(item)) issues.push({ path: p, message: `duplicate ${what} "${item}"` });
    else seen.add(item);
  }
  return issues.length > before ? undefined : [...seen];
}

/** A mapping of string to string; environment variable names are checked, values never coerced. */
function readStringMap(
  value: unknown,
  path: string,
  issues: DagIssue[],
  what: 'environment variable' | 'label',
): Record<string, string> | undefined {
  if (!isMapping(value)) {
    issues.push(expected(`a mapping of ${what} names to string values`, value, path));
    return undefined;
  }
  const before = issues.length;
  const entries: [string, string][] = [];
  for (const [key, v] of Object.entries(value)) {
    const p = keyPath(path, key);
    if (what === 'environment variable' && !ENV_NAME_PATTERN.test(key)) {
      issues.push({ path: p, message: `invalid environment variable name "${key}": expected letters, digits and "_", not starting with a digit` });
    } else if (what === 'label' && key === '') {
      issues.push({ path: p, message: 'label names must not be empty' });
    }
    const s = readString(v, p, issues, { noNul: true, quoteHint: true });
    if (s !== undefined) entries.push([key, s]);
  }
  // fromEntries defines own properties, so a key such as "__proto__" stays a plain key.
  return issues.length > before ? undefined : Object.fromEntries(entries);
}

// ---------------------------------------------------------------------------------------------
// Messages

function expected(what: string, value: unknown, path: string, suggestion?: string): DagIssue {
  const hint = suggestion === undefined ? '' : ` (did you mean "${suggestion}"?)`;
  return { path, message: `expected ${what}, got ${describe(value)}${hint}` };
}

function missing(key: string, path: string): DagIssue {
  return { path, message: `missing required key "${key}"` };
}

function unknownKey(key: string, path: string, allowed: readonly string[]): DagIssue {
  const close = suggest(key, allowed);
  const hint = close === undefined ? '' : ` (did you mean "${close}"?)`;
  return { path, message: `unknown key "${key}"${hint}; allowed keys: ${allowed.join(', ')}` };
}

/** `tasks[0].env.FOO`, or `labels["kubernetes.io/arch"]` when the key is not a plain name. */
function keyPath(parent: string, key: string): string {
  if (/^[A-Za-z_][A-Za-z0-9_-]*$/.test(key)) return parent === '' ? key : `${parent}.${key}`;
  return `${parent}[${JSON.stringify(key)}]`;
}

function describe(value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(value.length > 60 ? `${value.slice(0, 60)}…` : value);
  if (value === undefined) return 'nothing';
  if (value === null || typeof value !== 'object') return String(value);
  if (Array.isArray(value)) return value.length === 0 ? 'an empty list' : 'a list';
  return 'a mapping';
}

// ---------------------------------------------------------------------------------------------
// Small pure helpers

function isMapping(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function isTimezone(value: unknown): value is string {
  if (typeof value !== 'string' || value === '') return false;
  try {
    new Intl.DateTimeFormat(undefined, { timeZone: value });
    return true;
  } catch {
    return false; // RangeError: the only way Intl says "unknown time zone"
  }
}

/** `Z`, `+05:30`, `+0530`, `-08` → milliseconds east of UTC. */
function offsetMs(offset: string): number {
  if (offset === 'Z' || offset === 'z') return 0;
  const sign = offset.startsWith('-') ? -1 : 1;
  const digits = offset.slice(1).replace(':', '');
  return sign * (Number(digits.slice(0, 2)) * 60 + Number(digits.slice(2) || '0')) * 60_000;
}

/**
 * The instant at which clocks in `timezone` show `wallClock` (given as if it were UTC). Two
 * passes settle DST: a time skipped by a spring-forward gap lands just after the gap.
 */
function zonedToInstant(wallClock: number, timezone: string): number {
  const guess = wallClock - zoneOffsetAt(wallClock, timezone);
  return wallClock - zoneOffsetAt(guess, timezone);
}

const zoneFormats = new Map<string, Intl.DateTimeFormat>();

function zoneOffsetAt(instant: number, timezone: string): number {
  let format = zoneFormats.get(timezone);
  if (format === undefined) {
    format = new Intl.DateTimeFormat('en-US', {
      timeZone: timezone, hourCycle: 'h23',
      year: 'numeric', month: 'numeric', day: 'numeric', hour: 'numeric', minute: 'numeric', second: 'numeric',
    });
    zoneFormats.set(timezone, format);
  }
  const parts = format.formatToParts(instant);
  const get = (type: Intl.DateTimeFormatPartTypes): number => Number(parts.find((p) => p.type === type)?.value);
  const shown = Date.UTC(get('year'), get('month') - 1, get('day'), get('hour'), get('minute'), get('second'));
  return shown - Math.floor(instant / 1000) * 1000;
}

function utf8Length(s: string): number {
  let bytes = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x80) bytes += 1;
    else if (c < 0x800) bytes += 2;
    else if (c >= 0xd800 && c <= 0xdbff && i + 1 < s.length) {
      bytes += 4; // a surrogate pair is one 4-byte code point
      i++;
    } else bytes += 3;
  }
  return bytes;
}

/** The closest candidate by edit distance (case-insensitive), if it is close enough to be a typo. */
function suggest(input: string, candidates: readonly string[]): string | undefined {
  const needle = input.toLowerCase();
  const limit = Math.min(3, Math.max(1, Math.floor(needle.length / 3)));
  let best: string | undefined;
  let bestDistance = limit + 1;
  for (const candidate of candidates) {
    const d = editDistance(needle, candidate.toLowerCase(), bestDistance - 1);
    if (d < bestDistance) {
      best = candidate;
      bestDistance = d;
    }
  }
  return best;
}

/** Optimal-string-alignment distance (a swap of neighbours costs 1), or max + 1 once over max. */
function editDistance(a: string, b: string, max: number): number {
  if (Math.abs(a.length - b.length) > max) return max + 1;
  let prev2 = new Array<number>(b.length + 1).fill(0);
  let prev = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const row = new Array<number>(b.length + 1).fill(0);
    row[0] = i;
    let rowMin = i;
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      let d = Math.min((prev[j] as number) + 1, (row[j - 1] as number) + 1, (prev[j - 1] as number) + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) d = Math.min(d, (prev2[j - 2] as number) + 1);
      row[j] = d;
      rowMin = Math.min(rowMin, d);
    }
    if (rowMin > max) return max + 1;
    prev2 = prev;
    prev = row;
  }
  return prev[b.length] as number;
}
