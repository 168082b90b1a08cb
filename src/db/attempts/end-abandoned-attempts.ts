import { ATTEMPT_END_FROM } from '../../core/states.js';
import { EVENT_KIND, tiEvents } from '../events/record-events.js';
import { inlineLiterals } from '../inline-literals.js';
import type { Sql } from '../sql.js';
import { lostEvent, lostReturning, lostSet } from './lost-write.js';

/** An attempt ended because the agent process it was sent to is gone. */
export interface AbandonedAttemptRow {
  id: string;
  run_id: string;
  task_id: string;
  try_number: number;
  state: 'up_for_retry' | 'failed';
  /** The earlier incarnation that was given it. */
  delivered_to: string;
}

/**
 * An agent process said Hello, and holds (bound to it already) only what it listed: every other
 * attempt of this agent that an earlier process of it was given is over, as a lost one is —
 * up_for_retry or failed by the task's retry policy, error `agent_restarted: …` naming the earlier
 * process, its token cleared — so its retry gets a new try and a new token, and the earlier
 * process's reports about it are refused. One statement for all of them, each move in the events
 * log. An attempt claimed for the agent but not yet sent anywhere (`delivered_to` null) is not
 * touched: it is sent to the new process. Safe because an agent proves dead what its earlier
 * processes left and it does not hold before it says Hello (agent.proto, Hello.incarnation_id).
 */
export async function endAbandonedAttempts(
  sql: Sql,
  agentId: string,
  incarnationId: string,
): Promise<AbandonedAttemptRow[]> {
  const error = sql`'agent_restarted: agent ' || agent_id || ' restarted; its process ' || delivered_to
    || ' was given this attempt, and process ' || ${incarnationId}::text || ' does not hold it'`;
  return sql<AbandonedAttemptRow[]>`
    with moved as (
      update task_instances set ${lostSet(sql, error)}
      where agent_id = ${agentId} and state in (${inlineLiterals(sql, ATTEMPT_END_FROM)})
        and delivered_to is not null and delivered_to <> ${incarnationId}::uuid
      returning ${lostReturning(sql)}, delivered_to),
    ev as (${tiEvents(sql, EVENT_KIND.tiState, sql`moved`, lostEvent(sql, 'agent_restarted'))})
    select id, run_id, task_id, try_number, state, delivered_to from moved`;
}
