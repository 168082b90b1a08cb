import type { Sql } from '../sql.js';

/**
 * One UPDATE for the heartbeats of every live attempt, never one write per attempt. Resolves the
 * ti ids whose attempt is still current and running; any other attempt has been superseded,
 * reaped or cancelled, and its holder must stop it.
 */
export async function flushHeartbeats(sql: Sql, attempts: { tiId: string; attemptToken: string }[]): Promise<Set<string>> {
  if (attempts.length === 0) return new Set();
  const rows = await sql<{ id: string }[]>`
    update task_instances t set heartbeat_at = now()
    from unnest(${attempts.map((a) => a.tiId)}::bigint[], ${attempts.map((a) => a.attemptToken)}::uuid[]) as h(id, token)
    where t.id = h.id and t.attempt_token = h.token and t.state = 'running'
    returning t.id`;
  return new Set(rows.map((r) => r.id));
}
