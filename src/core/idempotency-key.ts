import { createHash } from 'node:crypto';

/**
 * A task instance's `LEOFLOW_IDEMPOTENCY_KEY`: 32 hex characters, the same across its tries,
 * different for another run or task, and unique across installs (the install id is hashed in), so
 * a task can dedupe its own external effects. Ids may contain any character: they are joined as a
 * JSON array, never with a separator that could make two pairs collide.
 */
export function idempotencyKey(install: string, runId: string, taskId: string): string {
  return createHash('sha256')
    .update(JSON.stringify(['leoflow-idempotency', install, runId, taskId]))
    .digest('hex')
    .slice(0, 32);
}
