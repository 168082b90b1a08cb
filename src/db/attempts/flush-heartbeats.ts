import { ACTIVE_TI_STATES } from '../../core/states.js';
import type { Sql } from '../sql.js';

/**
 * One UPDATE for the heartbeats of every live attempt, never one write per attempt. Resolves the
 * ti ids whose attempt is still current (queued or running: an agent may list an attempt it was
 * just given before its Started arrives); any other attempt has been superseded, reaped or
 * cancelled, and its holder must stop it.
 */
export async function flushHeartbeats(
  sql: Sql,
  attempts: { tiId: string; attemptToken: string }[],
): Promise<Set<string>> {
  if (attempts.length === 0) return new Set();
  const rows = await sql<{ id: string }[]>`
    update task_instances t set heartbeat_at = now()
    from unnest(${attempts.map((a) => a.tiId)}::bigint[], ${attempts.map((a) => a.attemptToken)}::uuid[]) as
      h(id, token)
    where t.id = h.id and t.attempt_token = h.token and t.state = any(${ACTIVE_TI_STATES as string[]}::text[])
    returning t.id`;
  return new Set(rows.map((r) => r.id));
}
