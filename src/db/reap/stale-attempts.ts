import { ACTIVE_TI_STATES } from '../../core/states.js';
import type { Sql } from '../sql.js';

export interface StaleAttempt {
  id: string;
  run_id: string;
  task_id: string;
  try_number: number;
  attempt_token: string;
  state: string;
  last_seen: Date;
}

/**
 * Attempts that may hold a live process (queued/running) and whose last sign of life — the
 * heartbeat, else the start, else the claim, so a TI that never heartbeated cannot hide — is
 * older than the threshold. Oldest first, at most `limit`.
 */
export async function staleAttempts(sql: Sql, thresholdMs: number, limit: number): Promise<StaleAttempt[]> {
  return sql<StaleAttempt[]>`
    select id, run_id, task_id, try_number, attempt_token, state,
           coalesce(heartbeat_at, started_at, queued_at) as last_seen
    from task_instances
    where state = any(${ACTIVE_TI_STATES as string[]}::text[])
      and coalesce(heartbeat_at, started_at, queued_at) < now() - ${thresholdMs} * interval '1 millisecond'
    order by coalesce(heartbeat_at, started_at, queued_at)
    limit ${limit}`;
}
