import type { TaskDefinition } from './dag-spec.js';

/**
 * Every task downstream of `taskId`, transitively (not `taskId` itself), in the order the spec
 * lists them. Pure: the clear reads it from the run's snapshot of the DAG, so a DAG applied since
 * the run was created does not change what a clear touches.
 */
export function downstreamTaskIds(tasks: readonly TaskDefinition[], taskId: string): string[] {
  const children = new Map<string, string[]>();
  for (const t of tasks) for (const d of t.dependsOn) (children.get(d) ?? children.set(d, []).get(d)!).push(t.id);
  const seen = new Set<string>();
  const todo = [taskId];
  while (todo.length > 0) {
    for (const next of children.get(todo.pop()!) ?? []) {
      if (!seen.has(next) && next !== taskId) {
        seen.add(next);
        todo.push(next);
      }
    }
  }
  return tasks.filter((t) => seen.has(t.id)).map((t) => t.id);
}
