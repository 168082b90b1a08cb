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

/** How much of one attempt's log is stored: lines of each output, and the highest seq. */
export interface StoredLogCounts {
  stdout: number;
  stderr: number;
  lastSeq: number;
}

/**
 * How much of each of these attempts' logs is stored, keyed `<ti id>/<try>`: a task re-attached
 * after a restart has its output read on from there, so its log ends whole with no line twice.
 */
export async function logsSoFar(
  sql: Sql,
  attempts: { tiId: string; tryNumber: number }[],
): Promise<Map<string, StoredLogCounts>> {
  const out = new Map<string, StoredLogCounts>(
    attempts.map((a) => [`${a.tiId}/${a.tryNumber}`, { stdout: 0, stderr: 0, lastSeq: 0 }]),
  );
  if (attempts.length === 0) return out;
  const rows = await sql<{ ti_id: string; try_number: number; stream: string; lines: number; last: number }[]>`
    select l.ti_id, l.try_number, l.stream, count(*)::int as lines, max(l.seq) as last
    from task_logs l
    join unnest(${attempts.map((a) => a.tiId)}::bigint[], ${attempts.map((a) => a.tryNumber)}::int[]) as a(id, try)
      on l.ti_id = a.id and l.try_number = a.try
    group by l.ti_id, l.try_number, l.stream`;
  for (const r of rows) {
    const so = out.get(`${r.ti_id}/${r.try_number}`);
    if (!so) continue;
    if (r.stream === 'stdout') so.stdout = r.lines;
    if (r.stream === 'stderr') so.stderr = r.lines;
    so.lastSeq = Math.max(so.lastSeq, r.last);
  }
  return out;
}
