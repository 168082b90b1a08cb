/**
 * The `tasks` list: each task read in file order, then the checks across tasks. A task's
 * duplicate-id issue follows that task's own issues, so the list reads top to bottom.
 */
import type { DagIssue, TaskDefinition } from '../dag-spec.js';
import { checkTaskGraph, indexTaskId } from './check-task-graph.js';
import { expected } from './issue-messages.js';
import { readTask, type TaskDraft } from './read-task.js';

/** At most this many tasks in one DAG. */
export const MAX_DAG_TASKS = 10_000;

/**
 * Reads every task and checks the graph they form (unknown dependencies, then cycles). Returns
 * the specs only when every task could be read; the graph issues are reported either way.
 */
export function readTasks(value: unknown, path: string, issues: DagIssue[]): TaskDefinition[] | undefined {
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
    indexTaskId(draft, firstIndex, path, issues);
    return draft;
  });
  checkTaskGraph(drafts, firstIndex, path, issues);
  const specs = drafts.map((d) => d.spec);
  return specs.every((s): s is TaskDefinition => s !== undefined) ? specs : undefined;
}
