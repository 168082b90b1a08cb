import type { Attempt } from '../../core/attempt.js';
import { buildInputs, type AttemptInputs } from '../../core/task-inputs.js';
import type { Sql } from '../sql.js';

/**
 * The inputs of an attempt: the outputs of its upstreams' successful tries in its run (each
 * upstream's current try, which is the one that succeeded), read as its process is about to start,
 * off the scheduler's path. An upstream that wrote no output is absent from the file; a variable of
 * `inputs:` that names it makes the inputs an error.
 */
export async function attemptInputs(
  sql: Sql,
  a: Pick<Attempt, 'runId' | 'taskId' | 'upstreams' | 'inputEnv' | 'failureSummary'>,
): Promise<AttemptInputs> {
  const inputs = await upstreamInputs(sql, a);
  if (!a.failureSummary || 'error' in inputs) return inputs;
  return { ...inputs, env: { ...inputs.env, [RUN_FAILURES_ENV]: await runFailures(sql, a.runId) } };
}

/** The variable a `one_failed` task reads what failed in its run from (JSON). */
export const RUN_FAILURES_ENV = 'LEOFLOW_RUN_FAILURES';
/** Tasks it lists at most, and the characters of each error: it travels in the environment. */
const FAILURES_LISTED = 20;
const FAILURE_ERROR_CHARS = 300;

/**
 * What failed in the run so far, for a task that runs because something did (`trigger_rule:
 * one_failed`): `[{task_id, state, try_number, exit_code, error}]`, failed tasks first.
 */
async function runFailures(sql: Sql, runId: string): Promise<string> {
  const rows = await sql<{ failures: string }[]>`
    select coalesce(jsonb_agg(f order by f.state <> 'failed', f.task_id), '[]'::jsonb)::text as failures
      from (select task_id, state, try_number, exit_code, left(error, ${FAILURE_ERROR_CHARS}) as error
              from task_instances
             where run_id = ${runId} and state in ('failed', 'upstream_failed')
             order by state <> 'failed', task_id
             limit ${FAILURES_LISTED}) f`;
  return rows[0]!.failures;
}

async function upstreamInputs(
  sql: Sql,
  a: Pick<Attempt, 'runId' | 'taskId' | 'upstreams' | 'inputEnv'>,
): Promise<AttemptInputs> {
  const upstreams = a.upstreams ?? [];
  if (upstreams.length === 0) return buildInputs(a.taskId, [], new Map(), a.inputEnv);
  const rows = await sql<{ task_id: string; value: string }[]>`
    select t.task_id, o.value::text as value
    from task_instances t
    join task_outputs o on o.ti_id = t.id and o.try_number = t.try_number and o.attempt_token = t.attempt_token
    where t.run_id = ${a.runId} and t.task_id = any(${upstreams}::text[]) and t.state = 'success'
    order by t.task_id`;
  return buildInputs(a.taskId, upstreams, new Map(rows.map((r) => [r.task_id, r.value])), a.inputEnv);
}
