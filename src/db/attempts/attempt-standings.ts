import type { AttemptKey, AttemptStanding } from '../../core/attempt.js';
import { ACTIVE_TI_STATES } from '../../core/states.js';
import type { Sql } from '../sql.js';

/**
 * The standing of each of these attempts, by TI id. An attempt over for less than `overForMs` is
 * left out: its agent, which has just reported its end, is still on its way out.
 */
export async function attemptStandings(
  sql: Sql,
  attempts: AttemptKey[],
  overForMs: number,
): Promise<Map<string, AttemptStanding>> {
  const out = new Map<string, AttemptStanding>();
  if (attempts.length === 0) return out;
  const rows = await sql<
    { id: string; try_number: number; attempt_token: string | null; state: string; settled: boolean }[]
  >`
    select id, try_number, attempt_token, state,
           coalesce(ended_at, '-infinity') < now() - ${overForMs} * interval '1 millisecond' as settled
    from task_instances where id = any(${attempts.map((a) => a.tiId)}::bigint[])`;
  const byId = new Map(rows.map((r) => [r.id, r]));
  for (const a of attempts) {
    const r = byId.get(a.tiId);
    // Another try, or another attempt of this try (a reset database), holds the TI: this one is over.
    if (!r || r.try_number !== a.tryNumber || (r.attempt_token !== null && r.attempt_token !== a.attemptToken))
      out.set(a.tiId, 'over');
    else if ((ACTIVE_TI_STATES as readonly string[]).includes(r.state))
      out.set(a.tiId, r.state === 'queued' ? 'queued' : 'running');
    else if (r.settled) out.set(a.tiId, 'over');
  }
  return out;
}
