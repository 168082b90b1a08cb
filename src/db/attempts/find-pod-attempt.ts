import type { PodIdentity } from '../../core/pod-identity.js';
import type { Sql } from '../sql.js';

/** What names a live attempt of the kubernetes executor's: enough to recompute its pod's name. */
export type PodAttemptIdentity = PodIdentity;

/**
 * The live kubernetes attempt holding this token, or null: a pod's agent proves with it that it
 * is that attempt's pod (the token is a random UUID only the pod's spec carries).
 */
export async function findPodAttempt(sql: Sql, tiId: string, attemptToken: string): Promise<PodAttemptIdentity | null> {
  const [row] = await sql<PodAttemptIdentity[]>`
    select r.dag_id as "dagId", ti.run_id::text as "runId", ti.task_id as "taskId", ti.id::text as "tiId",
           ti.try_number as "tryNumber", ti.attempt_token::text as "attemptToken"
      from task_instances ti join dag_runs r on r.id = ti.run_id
     where ti.id = ${tiId} and ti.attempt_token = ${attemptToken}::uuid
       and ti.executor = 'kubernetes' and ti.state in ('queued', 'running')`;
  return row ?? null;
}
