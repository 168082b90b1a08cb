import type { AttemptResult } from '../../core/attempt.js';
import { ATTEMPT_END_FROM, legalTiFrom } from '../../core/states.js';
import { EVENT_KIND, eventKind, insertEvents, tiEvents } from '../events/record-events.js';
import type { Fragment, Sql } from '../sql.js';
import { START_FROM, startedAt, startEvent } from './start-attempt.js';

const START_OR_END_FROM = [...new Set([...START_FROM, ...ATTEMPT_END_FROM])];

export type FinishVerdict = 'success' | 'failed' | 'up_for_retry' | 'cancelled' | 'rejected';

/**
 * Records the end of an attempt, fenced by try number and token: a report for a superseded
 * attempt changes nothing and resolves 'rejected'. A failure with tries left becomes
 * up_for_retry with an exponential backoff (retry_delay · 2^(try−1), capped) computed from the
 * TI's own columns, so the decision and the write are one statement.
 */
export async function finishAttempt(
  sql: Sql,
  a: { tiId: string; tryNumber: number; attemptToken: string },
  result: AttemptResult,
): Promise<FinishVerdict> {
  if (result.outcome === 'superseded') return 'rejected';
  if (result.outcome === 'cancelled') {
    // The run or TI was cancelled first (that is what stopped the process): keep the state,
    // record how the process ended.
    const from = [...legalTiFrom('cancelled'), 'cancelled'];
    const rows = await sql`
      update task_instances set state = 'cancelled', ended_at = coalesce(ended_at, now()),
        exit_code = ${result.exitCode}, signal = ${result.signal}, error = coalesce(error, ${result.error}), pid = null
      where id = ${a.tiId} and try_number = ${a.tryNumber} and attempt_token = ${a.attemptToken}
        and state = any(${from}::text[])`;
    return rows.count === 1 ? 'cancelled' : 'rejected';
  }
  const [row] = await finishAttempts(sql, [{ ...a, result }]);
  return row?.state ?? 'rejected';
}

/** The attempts `finishAttempts` ended, with the state each ended in, its DAG and how long it ran (s). */
export type FinishedRow = {
  id: string;
  try_number: number;
  token: string;
  run_id: string;
  state: Exclude<FinishVerdict, 'cancelled' | 'rejected'>;
  dag_id: string;
  ran_s: number | null;
};

/** Of an end written with its start (`startAndFinishAttempts`): the wait, when it started here. */
export type StartedAndFinishedRow = FinishedRow & { waited_s: number | null };

const endFigures = (sql: Sql) =>
  sql`(select d.dag_id from dag_runs d where d.id = run_id) as dag_id,
       extract(epoch from ended_at - started_at)::float8 as ran_s`;

type End = { tiId: string; tryNumber: number; attemptToken: string; result: AttemptResult };

/**
 * The reports as rows `r(id, try, token, ok, exit_code, signal, error, ended_ms, output, …extra)`: one array a
 * column.
 */
const endsTable = (sql: Sql, ends: End[], extra?: Fragment) => sql`
  select * from unnest(${ends.map((o) => o.tiId)}::bigint[], ${ends.map((o) => o.tryNumber)}::int[],
                       ${ends.map((o) => o.attemptToken)}::uuid[],
                       ${ends.map((o) => (o.result.outcome === 'success' ? 'true' : 'false'))}::text[]::bool[],
                       ${ends.map((o) => o.result.exitCode) as number[]}::int[],
                       ${ends.map((o) => o.result.signal) as string[]}::text[],
                       ${ends.map((o) => o.result.error) as string[]}::text[],
                       ${ends.map((o) => o.result.endedAt ?? null) as number[]}::float8[],
                       ${ends.map((o) => o.result.output ?? null) as string[]}::text[]${extra ?? sql``})`;

/**
 * The outputs of the attempts `moved` ended, from their reports `r`: written in the statement that
 * records the ends, so an output lands only with its attempt's end (its token current), whole.
 */
const outputsInsert = (sql: Sql) => sql`
  insert into task_outputs (ti_id, try_number, attempt_token, value, size_bytes)
  select m.id, m.try_number, m.attempt_token, r.output::jsonb, octet_length(r.output)
  from moved m join r on r.id = m.id and r.try = m.try_number and r.token = m.attempt_token
  where r.output is not null
  on conflict do nothing
  returning ti_id, try_number, size_bytes`;

/** A `ti.output` event for each output `out` stored (WatchRun shows it; the value is read with GetTaskOutput). */
const outputEvents = (sql: Sql) =>
  insertEvents(
    sql,
    sql`select m.run_id, m.id, ${eventKind(sql, EVENT_KIND.tiOutput)},
      jsonb_build_object('task_id', m.task_id, 'try', m.try_number, 'size_bytes', o.size_bytes)
    from out o join moved m on m.id = o.ti_id`,
  );

/**
 * The completion cache entries held by the attempts `moved` ended (a cached task's, cache-gate.ts):
 * a success makes its entry done with its output, reusable for its ttl; any other end frees it for
 * the next attempt. An attempt of a task without `cache:` holds none: one index probe finds nothing.
 */
const settleCache = (sql: Sql) => sql`
  cache_done as (
    update task_cache c set state = 'done', done_at = now(), value = r.output::jsonb,
      expires_at = now() + c.ttl_ms * interval '1 millisecond'
    from moved m join r on r.id = m.id and r.try = m.try_number and r.token = m.attempt_token
    where c.attempt_token = m.attempt_token and c.state = 'running' and m.state = 'success'),
  cache_freed as (
    delete from task_cache c using moved m
    where c.attempt_token = m.attempt_token and c.state = 'running' and m.state <> 'success')`;

/**
 * When the process of report `r` ended: its reported end (by this replica's clock, which on one
 * machine is the database's), never in the future; now when it has none. A time rather than "so
 * long ago": the statement may start well after it was built (behind the log lines and starts of
 * its batch), and its now() with it.
 */
const endedAt = (sql: Sql) => sql`least(now(), coalesce(to_timestamp(r.ended_ms / 1000), now()))`;

/**
 * An end's columns for TI `t` and its report `r`: success, or failed / up_for_retry by the TI's own
 * tries and backoff. The end is the process's real end (never before its recorded start); the
 * backoff counts from now, as the next try can start no sooner.
 */
const endColumns = (sql: Sql) => sql`
  state = case when r.ok then 'success' when t.try_number < t.max_tries then 'up_for_retry' else 'failed' end,
  next_try_at = case when not r.ok and t.try_number < t.max_tries
    then now() + least(t.retry_delay_ms * power(2, least(t.try_number - 1, 30)), t.max_retry_delay_ms) *
      interval '1 millisecond'
    end,
  ended_at = greatest(${endedAt(sql)}, t.started_at), exit_code = r.exit_code, signal = r.signal,
  error = r.error, pid = null`;

/** The events-log payload of an end, from the row the end wrote. */
const endEvent = (sql: Sql) => sql`jsonb_build_object('task_id', task_id, 'to', state, 'try', try_number,
  'exit_code', exit_code, 'signal', signal, 'error', error, 'next_try_at', next_try_at)`;

/**
 * Records the end of many attempts in one statement — success, or failed / up_for_retry by the
 * TI's own tries and backoff — each only if it is still the current attempt (fenced by try number
 * and token), each move in the events log. Cancelled and superseded ends go through
 * `finishAttempt`, which has its own rules. Resolves the rows ended.
 */
export function finishAttempts(sql: Sql, ends: End[]) {
  return sql<FinishedRow[]>`
    with r as (${endsTable(sql, ends)} as r(id, try, token, ok, exit_code, signal, error, ended_ms, output)),
    moved as (
      update task_instances t set ${endColumns(sql)}
      from r
      where t.id = r.id and t.try_number = r.try and t.attempt_token = r.token
        and t.state = any(${ATTEMPT_END_FROM as string[]}::text[])
      returning t.id, t.run_id, t.task_id, t.try_number, t.state, t.exit_code, t.signal, t.error, t.next_try_at,
        t.attempt_token,
        t.started_at, t.ended_at),
    ev as (${tiEvents(sql, EVENT_KIND.tiState, sql`moved`, endEvent(sql))}),
    out as (${outputsInsert(sql)}),
    out_ev as (${outputEvents(sql)}),
    ${settleCache(sql)}
    select id, try_number, attempt_token as token, run_id, state, ${endFigures(sql)} from moved`;
}

/**
 * The Started and the Finished of the same attempts, arriving together (a task that ends within
 * a batch of reports): one write a TI instead of two, queued → running → its end in one row
 * version, with both moves in the events log, in order. An attempt already running (its Started
 * sent again after a reconnect) is only ended. Fenced like the two it stands for; resolves the
 * rows ended, and an attempt missing from them was superseded (neither report applies).
 */
export function startAndFinishAttempts(
  sql: Sql,
  reports: (End & { pid: number | null; agentId: string | null; reportedAt: number })[],
) {
  const extra = sql`, ${reports.map((o) => o.pid) as number[]}::int[],
    ${reports.map((o) => o.agentId) as string[]}::text[],
    ${reports.map((o) => o.reportedAt)}::float8[]`;
  // Each attempt's start (if it was not running yet), then its end.
  const events = sql`
    select run_id, ti_id, ${eventKind(sql, EVENT_KIND.tiState)}, payload from (
      select 0 as o, run_id, id as ti_id, ${startEvent(sql)} as payload from moved where starting
      union all
      select 1, run_id, id, ${endEvent(sql)} from moved) e
    order by ti_id, o`;
  return sql<StartedAndFinishedRow[]>`
    with r as (${endsTable(sql, reports, extra)} as r(id, try, token, ok, exit_code, signal, error, ended_ms,
      output, pid, agent_id, reported_ms)),
    was as (
      select t.id, t.state = any(${START_FROM}::text[]) as starting
      from task_instances t join r on t.id = r.id and t.try_number = r.try and t.attempt_token = r.token
      where t.state = any(${START_OR_END_FROM}::text[])
      for no key update of t),
    moved as (
      update task_instances t set ${endColumns(sql)},
        started_at = case when w.starting then least(${startedAt(sql)}, ${endedAt(sql)}) else t.started_at end,
        heartbeat_at = case when w.starting then now() else t.heartbeat_at end,
        agent_id = case when w.starting then r.agent_id else t.agent_id end
      from r join was w on w.id = r.id
      where t.id = r.id and t.try_number = r.try and t.attempt_token = r.token
        and t.state = any(${START_OR_END_FROM}::text[])
      returning t.id, t.run_id, t.task_id, t.try_number, t.state, t.exit_code, t.signal, t.error, t.next_try_at,
        t.attempt_token,
        t.agent_id, w.starting, r.pid, t.started_at, t.ended_at, t.ready_at),
    ev as (${insertEvents(sql, events)}),
    out as (${outputsInsert(sql)}),
    out_ev as (${outputEvents(sql)}),
    ${settleCache(sql)}
    select id, try_number, attempt_token as token, run_id, state, ${endFigures(sql)},
      case when starting then extract(epoch from started_at - ready_at)::float8 end as waited_s
    from moved`;
}
