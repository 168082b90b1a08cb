import { STARTED_TI_STATES } from '../../core/states.js';
import { inlineLiterals } from '../inline-literals.js';
import type { Sql } from '../sql.js';

export interface OverdueAttempt {
  id: string;
  run_id: string;
  task_id: string;
  try_number: number;
  attempt_token: string;
  timeout_ms: number;
  started_at: Date;
}

/**
 * Running attempts with a timeout that started longer ago than the timeout plus `graceMs`: their
 * holder should have stopped them and reported the end by now. Oldest first, at most `limit`.
 * Both times are the database's, so no clock of a holder enters the verdict.
 */
export async function overdueAttempts(sql: Sql, graceMs: number, limit: number): Promise<OverdueAttempt[]> {
  return sql<OverdueAttempt[]>`
    select id, run_id, task_id, try_number, attempt_token, timeout_ms, started_at
    from task_instances
    where state in (${inlineLiterals(sql, STARTED_TI_STATES)}) and timeout_ms is not null
      and started_at < now() - (timeout_ms + ${graceMs}) * interval '1 millisecond'
    order by started_at
    limit ${limit}`;
}
