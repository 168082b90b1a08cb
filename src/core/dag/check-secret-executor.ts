/**
 * A Kubernetes Secret can only be given to a pod, so a task that refers to one must run on the
 * kubernetes executor. A task's own `executor:` is checked as the file is read; `default` is
 * checked where the edition's executor is known (the server's DAG parser).
 */
import type { DagIssue, DagSpec, TaskDefinition } from '../dag-spec.js';
import { describeSecretRef } from '../secret-ref.js';
import { placementExecutorIssues } from './check-placement-executor.js';

/** Issues for each Kubernetes Secret of a task whose executor (resolved) is not `kubernetes`. */
export function secretExecutorIssues(
  task: Pick<TaskDefinition, 'secretEnv'>,
  taskPath: string,
  executor: string,
  why = '',
): DagIssue[] {
  if (executor === 'kubernetes' || executor === 'default') return [];
  const issues: DagIssue[] = [];
  for (const [name, ref] of Object.entries(task.secretEnv ?? {})) {
    if (!('kubernetes' in ref)) continue;
    issues.push({
      path: `${taskPath}.env.${name}.secret.kubernetes`,
      message:
        `a Kubernetes Secret (${describeSecretRef(ref)}) is only given to pods: it needs executor: ` +
        `kubernetes, and this task's executor is ${executor}${why}`,
    });
  }
  return issues;
}

/**
 * The checks a task's own executor gets as the file is read, for every task whose executor is
 * `default`, now that the default is known: its Kubernetes Secrets, and its placement.
 */
export function defaultExecutorIssues(spec: DagSpec, defaultExecutor: string): DagIssue[] {
  const why = ` (the server's default)`;
  return spec.tasks.flatMap((t, i) =>
    t.executor === 'default'
      ? [
          ...secretExecutorIssues(t, `tasks[${i}]`, defaultExecutor, why),
          ...placementExecutorIssues(t, `tasks[${i}]`, defaultExecutor, why),
        ]
      : [],
  );
}
