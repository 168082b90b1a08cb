import type { Attempt } from '../../core/attempt.js';
import type { TaskDefinition } from '../../core/dag-spec.js';
import { ACTIVE_TI_STATES } from '../../core/states.js';
import { inlineLiterals } from '../inline-literals.js';
import type { Sql } from '../sql.js';
import { attemptOfRow, type AttemptRow } from './attempt-of-row.js';

/**
 * Every attempt of one executor still queued or running, rebuilt from the database: what a new
 * leader matches against the pods it lists. Read once per change of leader; each row carries its
 * own task's spec, not its DAG's whole version.
 */
export async function activeAttemptsOf(
  sql: Sql,
  executor: string,
  install: string,
): Promise<{ attempt: Attempt; running: boolean }[]> {
  const rows = await sql<(AttemptRow & { state: string; task: TaskDefinition | null })[]>`
    select t.id, t.run_id, t.task_id, t.state, t.try_number, t.max_tries, t.attempt_token, t.dispatch_key,
           r.dag_id, r.conf, r.logical_date, r.traceparent, r.tracestate,
           -- A mapped instance (task[17]) runs its task's spec.
           (select x from jsonb_array_elements(v.spec->'tasks') x
             where x->>'id' = regexp_replace(t.task_id, '\\[\\d+\\]$', '')) as task
    from task_instances t join dag_runs r on r.id = t.run_id
    join dag_versions v on v.dag_id = r.dag_id and v.version = r.dag_version
    where t.executor = ${executor} and t.state in (${inlineLiterals(sql, ACTIVE_TI_STATES)})`;
  const out: { attempt: Attempt; running: boolean }[] = [];
  for (const row of rows) {
    const task = row.task;
    if (!task) continue;
    out.push({ attempt: attemptOfRow(row, task, install), running: row.state !== 'queued' });
  }
  return out;
}
