import type { TaskDefinition } from './dag-spec.js';

/**
 * Protocol features an agent announces among its Hello capabilities, under the reserved `leoflow.`
 * prefix. An agent without a feature is never given work that needs it: an agent built before
 * `Assign.secret_env` ignores the field and would run the task without its secrets, silently.
 */
export const AGENT_FEATURES = {
  /** It reads `Assign.secret_env` and gives the task those variables (or fails the attempt). */
  secretEnv: 'leoflow.secret-env',
} as const;

/** Capabilities under this prefix are protocol features, not placement capabilities of the operator's. */
export const RESERVED_CAPABILITY_PREFIX = 'leoflow.';

/** Whether an attempt of this task needs an agent that announces `leoflow.secret-env`. */
export function needsSecretEnv(task: Pick<TaskDefinition, 'secretEnv'>): boolean {
  return task.secretEnv !== undefined && Object.keys(task.secretEnv).length > 0;
}
