import type { DagIssue, TaskDefinition } from '../dag-spec.js';

/**
 * Placement chooses among agents: on another executor it would be silently ignored. A task's own
 * `executor:` is checked as the file is read; `default` where the edition's executor is known.
 */
export function placementExecutorIssues(
  task: Partial<Pick<TaskDefinition, 'placement'>>,
  taskPath: string,
  executor: string,
  why = '',
): DagIssue[] {
  if (!task.placement || executor === 'agents' || executor === 'default') return [];
  return [
    {
      path: `${taskPath}.placement`,
      message: `applies only to tasks with executor: agents; this task's executor is ${executor}${why}`,
    },
  ];
}
