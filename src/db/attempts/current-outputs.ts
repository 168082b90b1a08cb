import type { Sql } from '../sql.js';

/** The current try's output of a task instance, and where a cached one came from. */
export interface CurrentOutput {
  sizeBytes: number;
  /** The JSON text; null when it is bigger than the inline limit (read it with GetTaskOutput). */
  json: string | null;
  cachedFrom: { runId: string; tryNumber: number } | null;
}

/**
 * The outputs of a run's task instances' current tries (of `tiIds` alone, when given: a page), and
 * their cache sources, by ti id: one statement, only for GetRun/ListTaskInstances asked
 * `with_outputs`, never on the scheduler's path. An output over `inlineMaxBytes` comes as its size only.
 */
export async function currentOutputs(
  sql: Sql,
  runId: string,
  inlineMaxBytes: number,
  tiIds?: readonly string[],
): Promise<Map<string, CurrentOutput>> {
  const rows = await sql<
    {
      id: string;
      size_bytes: number | null;
      json: string | null;
      source_run_id: string | null;
      source_try: number | null;
    }[]
  >`
    select t.id, o.size_bytes, case when o.size_bytes <= ${inlineMaxBytes} then o.value::text end as json,
      h.source_run_id, h.source_try
    from task_instances t
    left join task_outputs o on o.ti_id = t.id and o.try_number = t.try_number and o.attempt_token = t.attempt_token
    left join task_cache_hits h on h.ti_id = t.id and h.try_number = t.try_number
    where t.run_id = ${runId} and (o.ti_id is not null or h.ti_id is not null)
      and (${tiIds === undefined} or t.id = any(${(tiIds ?? []) as string[]}::bigint[]))
    order by t.id`;
  return new Map(
    rows.map((r) => [
      r.id,
      {
        sizeBytes: r.size_bytes ?? 0,
        json: r.json,
        cachedFrom: r.source_run_id !== null ? { runId: r.source_run_id, tryNumber: r.source_try! } : null,
      },
    ]),
  );
}
