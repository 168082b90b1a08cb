import type { Sql } from '../sql.js';
import { endWaits, type EndedWait } from './end-waits.js';

/**
 * Ends up to `limit` waits past their deadline, each with its `on_timeout` outcome, in one
 * statement that reads only the due ones (index task_waits_open_deadline): the leader's step costs
 * the same however many waits are open and not yet due.
 */
export async function endDueWaits(sql: Sql, limit: number): Promise<EndedWait[]> {
  return endWaits(
    sql,
    sql`select ti_id, on_timeout as to_state, 'timeout'::text as how, null::bigint as event_id, null::jsonb as detail
        from task_waits where ended_at is null and deadline <= now()
        order by deadline limit ${limit}`,
  );
}
