import { ACTIVE_TI_STATES } from '../../core/states.js';
import { inlineLiterals } from '../inline-literals.js';
import type { Sql } from '../sql.js';
import { pendingReasonEvents } from '../events/record-events.js';

/**
 * Why an attempt that is claimed waits to start (`POD_PENDING:Unschedulable:…`), for `run show`;
 * null clears it once it runs. Fenced by the attempt's token: a newer try's reason is never
 * overwritten.
 */
export async function notePendingReason(
  sql: Sql,
  a: { tiId: string; tryNumber: number; attemptToken: string },
  reason: string | null,
): Promise<void> {
  await sql`
    with moved as (
      update task_instances set pending_reason = ${reason}
      where id = ${a.tiId} and try_number = ${a.tryNumber} and attempt_token = ${a.attemptToken}
        and state in (${inlineLiterals(sql, ACTIVE_TI_STATES)}) and pending_reason is distinct from ${reason}
      returning id, run_id, task_id, try_number, pending_reason)
    ${pendingReasonEvents(sql, sql`moved`)}`;
}
