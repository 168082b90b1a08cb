import type { Attempt } from '../../core/attempt.js';
import { parseMappedTaskId } from '../../core/map-spec.js';
import { INPUT_ENV_CHARS, buildInputs, type AttemptInputs } from '../../core/task-inputs.js';
import type { Sql } from '../sql.js';

/**
 * The inputs of an attempt: the outputs of its upstreams' successful tries in its run (each
 * upstream's current try, which is the one that succeeded), read as its process is about to start,
 * off the scheduler's path. An upstream that wrote no output is absent from the file; a variable of
 * `inputs:` that names it makes the inputs an error.
 */
export async function attemptInputs(
  sql: Sql,
  a: Pick<Attempt, 'runId' | 'taskId' | 'upstreams' | 'inputEnv' | 'failureSummary'> &
    Partial<Pick<Attempt, 'tiId' | 'mapOver'>>,
): Promise<AttemptInputs> {
  // Both sent at once: they are on the way to every mapped instance's start, one at a time.
  const [upstream, item] = await Promise.all([upstreamInputs(sql, a), mapItemOf(sql, a)]);
  const inputs = withMapItem(a, upstream, item);
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
  a: Pick<Attempt, 'runId' | 'taskId' | 'upstreams' | 'inputEnv'> & Partial<Pick<Attempt, 'tiId' | 'mapOver'>>,
): Promise<AttemptInputs> {
  const upstreams = a.upstreams ?? [];
  if (upstreams.length === 0) return buildInputs(a.taskId, [], new Map(), a.inputEnv);
  // A mapped instance sees the list it maps over as its own item: reading and writing the whole
  // list for each of 100,000 items would make a map's cost grow with the square of its length.
  const over = a.mapOver && a.tiId ? a.mapOver : null;
  // A mapped upstream's output is the list of its mapped instances' outputs, in item order (null
  // for one that wrote none).
  const rows = await sql<{ task_id: string; value: string }[]>`
    select t.task_id,
           case when t.map_count is not null
                then (select coalesce(jsonb_agg(co.value order by c.map_index), '[]'::jsonb)::text
                      from task_instances c
                      left join task_outputs co on co.ti_id = c.id and co.try_number = c.try_number
                        and co.attempt_token = c.attempt_token
                      where c.map_parent = t.id)
                when t.task_id = ${over?.upstream ?? null}::text
                then (select case when cardinality(${over?.path ?? []}::text[]) = 0 then coalesce(me.map_item, 'null')
                                  else jsonb_set(o.value, ${over?.path ?? []}::text[], coalesce(me.map_item, 'null')) end
                      from task_instances me where me.id = ${over ? a.tiId! : null}::bigint)::text
                else o.value::text end as value
    from task_instances t
    left join task_outputs o on o.ti_id = t.id and o.try_number = t.try_number and o.attempt_token = t.attempt_token
    where t.run_id = ${a.runId} and t.task_id = any(${upstreams}::text[]) and t.state = 'success'
      and (o.ti_id is not null or t.map_count is not null)
    order by t.task_id`;
  return buildInputs(a.taskId, upstreams, new Map(rows.map((r) => [r.task_id, r.value])), a.inputEnv);
}

/** A mapped instance's item (JSON) and its index in the list, in its environment. */
export const MAP_ITEM_ENV = 'LEOFLOW_MAP_ITEM';
export const MAP_INDEX_ENV = 'LEOFLOW_MAP_INDEX';

/** A mapped instance's index in its list and its item (JSON); null for other attempts. */
async function mapItemOf(
  sql: Sql,
  a: Pick<Attempt, 'taskId'> & Partial<Pick<Attempt, 'tiId'>>,
): Promise<{ map_index: number | null; item: string | null } | null> {
  if (!a.tiId || parseMappedTaskId(a.taskId) === null) return null;
  const [row] = await sql<{ map_index: number | null; item: string | null }[]>`
    select map_index, map_item::text as item from task_instances where id = ${a.tiId}`;
  return row ?? null;
}

/** Adds a mapped instance's item and index to its inputs; other attempts' inputs are unchanged. */
function withMapItem(
  a: Pick<Attempt, 'taskId'>,
  inputs: AttemptInputs,
  row: { map_index: number | null; item: string | null } | null,
): AttemptInputs {
  if ('error' in inputs || !row || row.map_index === null) return inputs;
  const item = row.item ?? 'null';
  if (item.length > INPUT_ENV_CHARS)
    return { error: `the item of task "${a.taskId}" is ${item.length} characters, over ${INPUT_ENV_CHARS}` };
  return { ...inputs, env: { ...inputs.env, [MAP_ITEM_ENV]: item, [MAP_INDEX_ENV]: String(row.map_index) } };
}
