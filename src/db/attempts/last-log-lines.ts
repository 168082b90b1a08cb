import type { Sql } from '../sql.js';

/**
 * The last `count` lines one attempt's task wrote (stdout and stderr, not Leoflow's own `system`
 * lines), oldest first: what a failed pod's error quotes, so it shows the task's words rather
 * than its agent's log.
 */
export async function lastLogLines(sql: Sql, a: { tiId: string; tryNumber: number }, count: number): Promise<string[]> {
  const rows = await sql<{ line: string }[]>`
    select line from (
      select seq, line from task_logs
      where ti_id = ${a.tiId} and try_number = ${a.tryNumber} and stream <> 'system'
      order by seq desc limit ${count}) last
    order by seq`;
  return rows.map((r) => r.line);
}
