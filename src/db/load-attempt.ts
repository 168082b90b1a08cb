import type { Attempt } from '../core/attempt.js';
import type { DagSpec } from '../core/dag-spec.js';
import { ACTIVE_TI_STATES } from '../core/states.js';
import { inlineLiterals } from './inline-literals.js';
import { attemptOfRow, type AttemptRow } from './attempts/attempt-of-row.js';
import { specTaskId } from '../core/map-spec.js';
import type { Sql } from './sql.js';

/**
 * The current attempt of a task instance, rebuilt from the database for delivery to the agent it
 * was given to (by another replica, or before a reconnect). Null unless it is still queued or
 * running for that agent.
 */
export async function loadAttempt(sql: Sql, tiId: string, agentId: string, install: string): Promise<Attempt | null> {
  const [row] = await sql<(AttemptRow & { spec: DagSpec })[]>`
    select t.id, t.run_id, t.task_id, t.try_number, t.max_tries, t.attempt_token, t.dispatch_key,
           r.dag_id, v.spec, r.conf, r.logical_date, r.traceparent, r.tracestate
    from task_instances t join dag_runs r on r.id = t.run_id
    join dag_versions v on v.dag_id = r.dag_id and v.version = r.dag_version
    where t.id = ${tiId} and t.agent_id = ${agentId} and t.state in (${inlineLiterals(sql, ACTIVE_TI_STATES)})`;
  if (!row) return null;
  const task = row.spec.tasks.find((t) => t.id === specTaskId(row.task_id));
  if (!task) return null;
  return attemptOfRow(row, task, install, agentId);
}
