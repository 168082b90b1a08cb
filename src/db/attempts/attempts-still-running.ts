import type { Sql } from '../sql.js';

/**
 * Of these task instances, the ones whose attempt's process has not been recorded ended: a pid
 * is recorded at the start and cleared by the end, whatever the outcome (a cancelled attempt's end
 * included, written once its holder has stopped the process and sent its last log lines).
 */
export async function attemptsStillRunning(sql: Sql, tiIds: string[]): Promise<string[]> {
  if (tiIds.length === 0) return [];
  const rows = await sql<
    { id: string }[]
  >`select id from task_instances where id = any(${tiIds}::bigint[]) and pid is not null`;
  return rows.map((r) => r.id);
}
