import type { Sql, TxSql } from '../sql.js';

/**
 * The inputs of these waits (ti ids): for each, its run's succeeded tasks among `tasks` with the
 * output of their current try, keyed by task id, as LEOFLOW_INPUTS holds them. Read only for
 * waits whose match names `$inputs.` (core/match-inputs.ts), when an event of their name comes.
 */
export async function inputsOfWaits(
  tx: Sql | TxSql,
  tiIds: readonly string[],
  tasks: readonly string[],
): Promise<Map<string, Record<string, unknown>>> {
  if (tiIds.length === 0) return new Map();
  const rows = await tx<{ ti_id: string; inputs: Record<string, unknown> }[]>`
    select w.id::text as ti_id, jsonb_object_agg(t.task_id, o.value) as inputs
      from task_instances w
      join task_instances t on t.run_id = w.run_id and t.state = 'success'
                           and t.task_id = any(${tasks as string[]}::text[])
      join task_outputs o on o.ti_id = t.id and o.try_number = t.try_number and o.attempt_token = t.attempt_token
     where w.id = any(${tiIds as string[]}::bigint[])
     group by w.id`;
  return new Map(rows.map((r) => [r.ti_id, r.inputs]));
}
