import type { Attempt } from '../../core/attempt.js';
import { attemptOf } from '../../core/attempt-env.js';
import type { TaskSpec } from '../../core/dag-spec.js';
import { ACTIVE_TI_STATES } from '../../core/states.js';
import { inlineLiterals } from '../inline-literals.js';
import { runTraceOf } from '../runs.js';
import type { Sql } from '../sql.js';

/**
 * Every attempt of one executor still queued or running, rebuilt from the database: what a new
 * leader matches against the pods it lists. Read once per change of leader; each row carries its
 * own task's spec, not its DAG's whole version.
 */
export async function activeAttemptsOf(sql: Sql, executor: string): Promise<{ attempt: Attempt; running: boolean }[]> {
  const rows = await sql<
    {
      id: string;
      run_id: string;
      task_id: string;
      state: string;
      try_number: number;
      max_tries: number;
      attempt_token: string;
      dispatch_key: string;
      dag_id: string;
      task: TaskSpec | null;
      conf: Record<string, unknown>;
      logical_date: Date;
      traceparent: string | null;
      tracestate: string | null;
    }[]
  >`
    select t.id, t.run_id, t.task_id, t.state, t.try_number, t.max_tries, t.attempt_token, t.dispatch_key,
           r.dag_id, r.conf, r.logical_date, r.traceparent, r.tracestate,
           (select x from jsonb_array_elements(v.spec->'tasks') x where x->>'id' = t.task_id) as task
    from task_instances t join dag_runs r on r.id = t.run_id
    join dag_versions v on v.dag_id = r.dag_id and v.version = r.dag_version
    where t.executor = ${executor} and t.state in (${inlineLiterals(sql, ACTIVE_TI_STATES)})`;
  const out: { attempt: Attempt; running: boolean }[] = [];
  for (const row of rows) {
    const task = row.task;
    if (!task) continue;
    const attempt = attemptOf(
      {
        tiId: row.id,
        runId: row.run_id,
        dagId: row.dag_id,
        taskId: row.task_id,
        task,
        conf: row.conf,
        logicalDate: row.logical_date,
        runTrace: runTraceOf(row),
      },
      {
        tryNumber: row.try_number,
        maxTries: row.max_tries,
        attemptToken: row.attempt_token,
        dispatchKey: row.dispatch_key,
      },
    );
    out.push({ attempt, running: row.state !== 'queued' });
  }
  return out;
}
