import { ATTEMPT_ENDED_TI_STATES } from '../../core/states.js';
import { inlineLiterals } from '../inline-literals.js';
import type { Sql } from '../sql.js';

/** The end recorded for an attempt (ti, try, token), or null while it has none. */
export async function recordedEnd(
  sql: Sql,
  ref: { tiId: string; tryNumber: number; attemptToken: string },
): Promise<{ state: string; exitCode: number | null } | null> {
  const [row] = await sql<{ ended: boolean; state: string; exit_code: number | null }[]>`
    select state in (${inlineLiterals(sql, ATTEMPT_ENDED_TI_STATES)}) and ended_at is not null as ended, state,
      exit_code
    from task_instances where id = ${ref.tiId} and try_number = ${ref.tryNumber} and attempt_token =
      ${ref.attemptToken}`;
  return row?.ended ? { state: row.state, exitCode: row.exit_code } : null;
}
