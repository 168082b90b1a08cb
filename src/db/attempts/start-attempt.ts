import { legalTiFrom } from '../../core/states.js';
import { EVENT_KIND, tiEvents } from '../events/record-events.js';
import type { Sql } from '../sql.js';

/** The states an attempt may be started from. */
export const START_FROM = legalTiFrom('running') as string[];

/** The events-log payload of a start, from a row with task_id, try_number, pid and agent_id. */
export const startEvent = (sql: Sql) =>
  sql`jsonb_build_object('task_id', task_id, 'to', 'running', 'try', try_number, 'pid', pid, 'agent_id', agent_id)`;

/** One attempt's start, as reported: fenced by try number and token. */
export interface StartReport {
  tiId: string;
  tryNumber: number;
  attemptToken: string;
  pid: number | null;
  agentId: string | null;
  /** When the start was reported to this replica (ms): the statement may run well after, behind its batch. */
  reportedAt: number;
}

/**
 * When the attempt of report `r` started: when it was reported (by this replica's clock, which on
 * one machine is the database's), kept between its claim (`queued_at`) and now. Not the
 * statement's now(): a start written behind a busy batch would shorten the recorded run, while
 * its end is the process's real end.
 */
export const startedAt = (sql: Sql) => sql`greatest(t.queued_at, least(now(), to_timestamp(r.reported_ms / 1000)))`;

/** The attempts `startAttempts` moved to running, each with its DAG and how long it waited (ready → started, s). */
export type StartedRow = { id: string; try_number: number; token: string; dag_id: string; waited_s: number | null };

/** The DAG of a row with a run_id, and its wait (ready → started), for the metrics. */
export const startFigures = (sql: Sql) =>
  sql`(select d.dag_id from dag_runs d where d.id = run_id) as dag_id, extract(epoch from started_at -
    ready_at)::float8 as waited_s`;

/**
 * queued → running for many attempts in one statement, each only if it is still the current
 * attempt (fenced by try number and token), each move in the events log. Resolves the rows moved;
 * an attempt missing from them was superseded.
 */
export function startAttempts(sql: Sql, reports: StartReport[]) {
  return sql<StartedRow[]>`
    with r as (
      select * from unnest(${reports.map((o) => o.tiId)}::bigint[], ${reports.map((o) => o.tryNumber)}::int[],
                           ${reports.map((o) => o.attemptToken)}::uuid[],
                             ${reports.map((o) => o.pid) as number[]}::int[],
                           ${reports.map((o) => o.agentId) as string[]}::text[],
                           ${reports.map((o) => o.reportedAt)}::float8[])
        as r(id, try, token, pid, agent_id, reported_ms)),
    moved as (
      update task_instances t set state = 'running', started_at = ${startedAt(sql)}, heartbeat_at = now(), pid = r.pid,
        agent_id = r.agent_id
      from r
      where t.id = r.id and t.try_number = r.try and t.attempt_token = r.token and t.state = any(${START_FROM}::text[])
      returning t.id, t.run_id, t.task_id, t.try_number, t.pid, t.agent_id, t.attempt_token, t.started_at, t.ready_at),
    ev as (${tiEvents(sql, EVENT_KIND.tiState, sql`moved`, startEvent(sql))})
    select id, try_number, attempt_token as token, ${startFigures(sql)} from moved`;
}

/** queued → running for the current attempt only (fenced by try number and token). */
export async function startAttempt(
  sql: Sql,
  a: { tiId: string; tryNumber: number; attemptToken: string },
  info: { pid: number | null; agentId: string | null },
): Promise<boolean> {
  const report = { ...a, pid: info.pid, agentId: info.agentId, reportedAt: Date.now() };
  return (await startAttempts(sql, [report])).length === 1;
}
