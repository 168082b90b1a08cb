/**
 * The top-level mapping of a DAG file: each key read in file order, then the required keys, then
 * the defaults filled in. Task-level reading lives in `read-tasks.ts`.
 */
import { PRIORITY_RANGE, type DagIssue, type DagSpec } from '../dag-spec.js';
import { isMapping, MAX_INT4, readBoolean, readId, readInteger, readString, readStringList } from './field-readers.js';
import { describe, expected, keyPath, missing, unknownKey } from './issue-messages.js';
import { readDeadline } from './read-deadline.js';
import { readSchedule } from './read-schedule.js';
import { readStartDate } from './read-start-date.js';
import { readTasks } from './read-tasks.js';
import { readNotify } from './read-notify.js';
import { readTriggers } from './read-triggers.js';
import { isTimezone } from './zoned-to-instant.js';

const DEFAULT_TIMEZONE = 'UTC';
const DEFAULT_MAX_ACTIVE_RUNS = 16;

const DAG_KEYS = [
  'dag_id',
  'description',
  'schedule',
  'timezone',
  'catchup',
  'start_date',
  'max_active_runs',
  'priority',
  'tags',
  'triggers',
  'notify',
  'deadline',
  'tasks',
] as const;

/**
 * Reads the loaded document into a normalized spec, or returns undefined when `dag_id` or
 * `tasks` could not be read. Every problem found is pushed onto `issues`; the caller must treat
 * any issue as failure, since a spec can come back alongside issues in other fields.
 */
export function readDag(root: unknown, issues: DagIssue[]): DagSpec | undefined {
  if (!isMapping(root)) {
    const message =
      root === null
        ? 'the file is empty; a DAG file needs at least dag_id and tasks'
        : `expected the document to be a mapping with at least dag_id and tasks, got ${describe(root)}`;
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
          issues.push({
            path,
            message: `unknown time zone ${describe(value)}; expected an IANA name like "Europe/Paris"`,
          });
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
      case 'priority':
        dag.priority = readInteger(value, path, PRIORITY_RANGE.min, PRIORITY_RANGE.max, issues);
        break;
      case 'tags':
        dag.tags = readStringList(value, path, issues, 'tag');
        break;
      case 'triggers': {
        const triggers = readTriggers(value, path, issues);
        if (triggers && triggers.length > 0) dag.triggers = triggers;
        break;
      }
      case 'notify': {
        const notify = readNotify(value, path, issues);
        if (notify) dag.notify = notify;
        break;
      }
      case 'deadline':
        dag.deadlineMs = readDeadline(value, path, issues);
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
    ...(dag.priority !== undefined ? { priority: dag.priority } : {}),
    tags: dag.tags ?? [],
    ...(dag.triggers ? { triggers: dag.triggers } : {}),
    ...(dag.notify ? { notify: dag.notify } : {}),
    ...(dag.deadlineMs !== undefined ? { deadlineMs: dag.deadlineMs } : {}),
    tasks: dag.tasks,
  };
}
