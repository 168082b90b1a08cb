import { legalTiFrom } from '../../core/states.js';
import type { Sql } from '../sql.js';

const START_FROM = legalTiFrom('running') as string[];

/** queued → running for the current attempt only (fenced by try number and token). */
export async function startAttempt(
  sql: Sql,
  a: { tiId: string; tryNumber: number; attemptToken: string },
  info: { pid: number | null; agentId: string | null },
): Promise<boolean> {
  const rows = await sql`
    with moved as (
      update task_instances set state = 'running', started_at = now(), heartbeat_at = now(),
        pid = ${info.pid}, agent_id = ${info.agentId}
      where id = ${a.tiId} and try_number = ${a.tryNumber} and attempt_token = ${a.attemptToken}
        and state = any(${START_FROM}::text[])
      returning id, run_id, task_id, try_number)
    insert into events (run_id, ti_id, kind, payload)
    select run_id, id, 'ti.state', jsonb_build_object('task_id', task_id, 'to', 'running', 'try', try_number,
                                                      'pid', ${info.pid}::int, 'agent_id', ${info.agentId}::text) from moved
    returning ti_id`;
  return rows.count === 1;
}
