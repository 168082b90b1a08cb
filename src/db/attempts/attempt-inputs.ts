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
