import { ACTIVE_TI_STATES } from '../core/states.js';
import { inlineLiterals } from './inline-literals.js';
import type { Sql } from './sql.js';

/**
 * When an agent's row may go: no live stream holds it, and no attempt names it. A stream is live
 * while its session is set and the agent was seen within `liveMs` (the rule by which another
 * process may take the id, in `connectAgent`): a session left set by a replica that died holds
 * nothing. An attempt still queued or running waits for its agent's reports and reconnect.
 */
export function agentForgettable(sql: Sql, liveMs: number) {
  return sql`
    (a.session_id is null or a.last_seen_at is null or a.last_seen_at < now() - ${liveMs} * interval '1 millisecond')
    and not exists (select 1 from task_instances t where t.agent_id = a.agent_id and t.state in
      (${inlineLiterals(sql, ACTIVE_TI_STATES)}))`;
}

/** An attempt that keeps its agent from being forgotten. */
export interface AttemptKeepingAgent {
  runId: string;
  taskId: string;
  state: string;
}

/** Why an agent was not forgotten, or that it was. */
export type ForgetOutcome =
  | { outcome: 'forgotten'; lastSeenAt: Date | null }
  | { outcome: 'unknown' }
  | { outcome: 'connected'; replica: string | null; lastSeenAt: Date | null }
  | { outcome: 'holds'; attempts: number; first: AttemptKeepingAgent[] };

/** How many attempts of a refused agent are named in the answer. */
const NAMED_ATTEMPTS = 3;

/**
 * Deletes one agent's row if it may go (`agentForgettable`), and otherwise says why not. The same
 * id may connect again later: its Hello makes a new row, with nothing of the old one (draining
 * included). The row is locked while deciding, so a Hello of that id waits and then inserts.
 */
export async function forgetAgent(sql: Sql, agentId: string, liveMs: number): Promise<ForgetOutcome> {
  const [row] = await sql<
    {
      forgotten: boolean;
      connected_replica: string | null;
      last_seen_at: Date | null;
      streaming: boolean;
      attempts: number;
      first: AttemptKeepingAgent[];
    }[]
  >`
    with target as (
      select a.agent_id, a.connected_replica, a.last_seen_at,
        a.session_id is not null and a.last_seen_at >= now() - ${liveMs} * interval '1 millisecond' as streaming
      from agents a where a.agent_id = ${agentId} for update
    ), gone as (
      delete from agents a using target where a.agent_id = target.agent_id and ${agentForgettable(sql, liveMs)}
      returning a.agent_id
    )
    select exists (select 1 from gone) as forgotten, t.connected_replica, t.last_seen_at, coalesce(t.streaming,
      false) as streaming,
      (select count(*)::int from task_instances ti where ti.agent_id = t.agent_id and ti.state in
        (${inlineLiterals(sql, ACTIVE_TI_STATES)})) as attempts,
      coalesce((select json_agg(json_build_object('runId', f.run_id::text, 'taskId', f.task_id, 'state',
        f.state)) from (
        select ti.run_id, ti.task_id, ti.state from task_instances ti
        where ti.agent_id = t.agent_id and ti.state in (${inlineLiterals(sql, ACTIVE_TI_STATES)})
        order by ti.id limit ${NAMED_ATTEMPTS}) f), '[]'::json) as first
    from target t`;
  if (!row) return { outcome: 'unknown' };
  if (row.forgotten) return { outcome: 'forgotten', lastSeenAt: row.last_seen_at };
  if (row.streaming) return { outcome: 'connected', replica: row.connected_replica, lastSeenAt: row.last_seen_at };
  return { outcome: 'holds', attempts: row.attempts, first: row.first };
}
