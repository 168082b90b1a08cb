/**
 * The control plane's own namespace holds its Secrets (the database URL, the admin token) and its
 * ServiceAccount: a task pod there could read the first as a `secret:` env and run as the second.
 * So no task may name it; checked where the control plane's namespace is known (the server's DAG
 * parser), and the server refuses to start with it as the tasks' default.
 */
import type { DagIssue, DagSpec } from '../dag-spec.js';

/** An issue for each task whose `kubernetes.namespace` is the control plane's own. */
export function controlPlaneNamespaceIssues(spec: DagSpec, controlPlaneNamespace: string): DagIssue[] {
  return spec.tasks.flatMap((t, i) =>
    t.kubernetes?.namespace === controlPlaneNamespace
      ? [
          {
            path: `tasks[${i}].kubernetes.namespace`,
            message:
              `${JSON.stringify(controlPlaneNamespace)} is the control plane's own namespace: ` +
              `its Secrets (the database URL, the admin token) and its ServiceAccount are not for tasks; ` +
              `leave namespace out (the tasks' namespace) or name another`,
          },
        ]
      : [],
  );
}
