import type { Sql } from './sql.js';

export interface LogRow {
  ti_id: string;
  task_id: string;
  try_number: number;
  seq: number;
  stream: string;
  line: string;
  at: Date;
}

/**
 * Log lines of a run after a cursor, in (ti, try, seq) order. The cursor is per attempt, so a
 * follower can ask "what is new" without re-reading.
 */
export async function readRunLogs(
  sql: Sql,
  q: { runId: string; taskId?: string; tryNumber?: number; after: Map<string, number>; limit: number },
): Promise<LogRow[]> {
  const keys = [...q.after.keys()];
  const rows = await sql<LogRow[]>`
    select l.ti_id, ti.task_id, l.try_number, l.seq, l.stream, l.line, l.at
    from task_logs l join task_instances ti on ti.id = l.ti_id
    left join unnest(${keys}::text[], ${keys.map((k) => q.after.get(k)!)}::int[]) as c(k, seq)
      on c.k = l.ti_id || '/' || l.try_number
    where ti.run_id = ${q.runId}
      and (${q.taskId ?? null}::text is null or ti.task_id = ${q.taskId ?? null})
      and (${q.tryNumber ?? null}::int is null or l.try_number = ${q.tryNumber ?? null})
      and l.seq > coalesce(c.seq, 0)
    order by l.at, l.ti_id, l.try_number, l.seq
    limit ${q.limit}`;
  return rows;
}
