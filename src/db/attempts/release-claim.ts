import { CLAIMED_TI_STATES } from '../../core/states.js';
import { EVENT_KIND, tiEvents } from '../events/record-events.js';
import { inlineLiterals } from '../inline-literals.js';
import type { Fragment, Sql } from '../sql.js';

/**
 * Gives back a claim that could not be delivered (the chosen agent's stream went away between
 * placement and delivery): queued → scheduled, the try number and token undone, fenced by that
 * token, so only the claimer can do it and only before the attempt started.
 */
export async function releaseClaim(
  sql: Sql,
  a: { tiId: string; tryNumber: number; attemptToken: string },
  reason: string,
): Promise<boolean> {
  const rows = await sql`
    with moved as (${releaseMove(sql, a, reason)})
    ${releaseEvents(sql, reason)}
    returning ti_id`;
  return rows.count === 1;
}

/** The move a release writes, fenced by the attempt's token; `guard`, a further condition. */
export function releaseMove(
  sql: Sql,
  a: { tiId: string; tryNumber: number; attemptToken: string },
  reason: string,
  guard: Fragment = sql`true`,
): Fragment {
  return sql`
    update task_instances set state = 'scheduled', try_number = try_number - 1, attempt_token = null,
      dispatch_key = null, agent_id = null, queued_at = null, pending_reason = ${reason}
    where id = ${a.tiId} and try_number = ${a.tryNumber} and attempt_token = ${a.attemptToken} and state in
      (${inlineLiterals(sql, CLAIMED_TI_STATES)})
      and ${guard}
    returning id, run_id, task_id, try_number`;
}

/** The event of each release in `moved`. */
export function releaseEvents(sql: Sql, reason: string): Fragment {
  return tiEvents(
    sql,
    EVENT_KIND.tiState,
    sql`moved`,
    sql`jsonb_build_object('task_id', task_id, 'to', 'scheduled', 'try', try_number, 'reason', ${reason}::text)`,
  );
}
