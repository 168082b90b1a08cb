import type { Sql } from '../sql.js';

/** One attempt's stored output. */
export interface StoredOutput {
  tryNumber: number;
  attemptToken: string;
  /** The JSON text, as stored. */
  json: string;
  sizeBytes: number;
  recordedAt: Date;
}

/**
 * The outputs stored of a run's task, one per try that wrote one, newest try first; `tryNumber`
 * picks one try. Empty when the task is unknown or wrote none.
 */
export async function taskOutputs(
  sql: Sql,
  runId: string,
  taskId: string,
  tryNumber?: number,
): Promise<StoredOutput[]> {
  const rows = await sql<
    { try_number: number; attempt_token: string; json: string; size_bytes: number; recorded_at: Date }[]
  >`
    select o.try_number, o.attempt_token, o.value::text as json, o.size_bytes, o.recorded_at
    from task_instances t join task_outputs o on o.ti_id = t.id
    where t.run_id = ${runId} and t.task_id = ${taskId}
      and (${tryNumber ?? null}::int is null or o.try_number = ${tryNumber ?? null}::int)
    order by o.try_number desc, o.recorded_at desc`;
  return rows.map((r) => ({
    tryNumber: r.try_number,
    attemptToken: r.attempt_token,
    json: r.json,
    sizeBytes: r.size_bytes,
    recordedAt: r.recorded_at,
  }));
}
