import { WAIT_END_FROM } from '../../core/states.js';
import { EVENT_KIND, eventKind, insertEvents } from '../events/record-events.js';
import type { Fragment, Sql, TxSql } from '../sql.js';

/** How a wait ended: its event, a person's word, or its deadline. */
export type WaitEnd = 'event' | 'approved' | 'rejected' | 'timeout';

/** A wait ended: its task instance moved, and the run to plan now. */
export interface EndedWait {
  ti_id: string;
  run_id: string;
  task_id: string;
  state: 'success' | 'failed' | 'skipped';
}

/**
 * Ends waits in one statement: each task instance still `waiting` moves to its outcome (guarded by
 * the state table), its task_waits row is closed with how it ended (and the event that ended it),
 * and the move is recorded in the events log with `detail` (who approved, the note, the event id);
 * a wait ended by its event stores the event's payload as its output (task_outputs).
 * `ends` is a `select` of (ti_id, to_state, how, event_id, detail jsonb) over open waits. A wait an
 * earlier writer ended is left alone: two events (or an event and the deadline) racing for one
 * wait end it once, as the second's guarded update finds it no longer waiting. A row whose task
 * instance left `waiting` another way (cancelled) is closed as 'gone'.
 */
export function endWaitsQuery(sql: Sql | TxSql, ends: Fragment): Fragment {
  return sql`
    with e as materialized (${ends}),
    moved as (
      update task_instances t set state = e.to_state, ended_at = now(), pending_reason = null,
        error = case when e.to_state = 'failed' then 'wait ended: ' || e.how else null end,
        -- A wait its event ended keeps the event's payload as its output, under a token of its own
        -- (the key outputs are read by, as an attempt's are: inputs, GetTaskOutput).
        attempt_token = case when e.event_id is not null and e.to_state = 'success' then gen_random_uuid()
                             else t.attempt_token end
      from e join task_waits w on w.ti_id = e.ti_id and w.ended_at is null
      where t.id = e.ti_id and t.state = any(${WAIT_END_FROM as string[]}::text[])
      returning t.id, t.run_id, t.task_id, t.try_number, t.state, t.attempt_token, e.how, e.event_id, e.detail),
    output as (
      insert into task_outputs (ti_id, try_number, attempt_token, value, size_bytes)
      select m.id, m.try_number, m.attempt_token, x.payload, octet_length(x.payload::text)
        from moved m join external_events x on x.id = m.event_id
       where m.state = 'success' and m.attempt_token is not null),
    closed as (
      update task_waits w set ended_at = now(),
        outcome = case when exists (select 1 from moved where moved.id = w.ti_id) then e.how else 'gone' end,
        event_id = case when exists (select 1 from moved where moved.id = w.ti_id) then e.event_id end
      from e where w.ti_id = e.ti_id and w.ended_at is null
      returning w.ti_id),
    ev as (${insertEvents(
      sql,
      sql`select run_id, id, ${eventKind(sql, EVENT_KIND.tiState)},
                 jsonb_build_object('task_id', task_id, 'to', state, 'from', 'waiting', 'try', try_number,
                                    'ended_by', how)
                 || case when event_id is null then '{}'::jsonb else jsonb_build_object('event_id', event_id::text) end
                 || coalesce(detail, '{}'::jsonb)
          from moved order by id`,
    )})
    select id::text as ti_id, run_id::text, task_id, state from moved`;
}

/** The waits in `ends` (see `endWaitsQuery`) ended; those another writer ended first are not listed. */
export async function endWaits(sql: Sql | TxSql, ends: Fragment): Promise<EndedWait[]> {
  return (await sql<EndedWait[]>`${endWaitsQuery(sql, ends)}`) as unknown as EndedWait[];
}

/** One row of `ends` for each given wait, for `endWaits`. */
export function waitEnds(
  sql: Sql | TxSql,
  rows: { tiId: string; to: 'success' | 'failed' | 'skipped'; how: WaitEnd; eventId: string | null; detail?: object }[],
): Fragment {
  return sql`select ti_id, to_state, how, event_id, detail::jsonb as detail
    from unnest(${rows.map((r) => r.tiId)}::bigint[], ${rows.map((r) => r.to)}::text[],
      ${rows.map((r) => r.how)}::text[], ${rows.map((r) => r.eventId) as string[]}::bigint[],
      ${rows.map((r) => JSON.stringify(r.detail ?? {}))}::text[])
    as e(ti_id, to_state, how, event_id, detail)`;
}
