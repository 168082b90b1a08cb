import { ATTEMPT_END_FROM } from '../../core/states.js';
import { EVENT_KIND, eventKind, insertEvents } from '../events/record-events.js';
import type { Sql } from '../sql.js';
import { START_FROM } from '../attempts/start-attempt.js';

const START_OR_END_FROM = [...new Set([...START_FROM, ...ATTEMPT_END_FROM])];

/**
 * Ends a cached task's attempt with the result of an earlier success (takeCacheEntry's hit): the
 * task instance moves to success without its process ever starting, with that result's output as
 * its own, a record of where it came from (task_cache_hits), and its moves and a `ti.cached` event
 * in the events log. Fenced by the attempt's token, like any end; false when it was no longer
 * current.
 */
export async function finishFromCache(
  sql: Sql,
  a: { tiId: string; tryNumber: number; attemptToken: string },
  hit: { value: string | null; keyHash: string; source: { tiId: string; runId: string; tryNumber: number } },
): Promise<boolean> {
  const reason = `cached: the result of run ${hit.source.runId}, try ${hit.source.tryNumber}, has the same key`;
  const rows = await sql`
    with moved as (
      update task_instances t set state = 'success', started_at = coalesce(t.started_at, now()), ended_at = now(),
        heartbeat_at = now(), exit_code = 0, signal = null, error = null, pid = null, pending_reason = null
      where t.id = ${a.tiId} and t.try_number = ${a.tryNumber} and t.attempt_token = ${a.attemptToken}
        and t.state = any(${START_OR_END_FROM}::text[])
      returning t.id, t.run_id, t.task_id, t.try_number, t.attempt_token),
    src as (select s.task_id from task_instances s where s.id = ${hit.source.tiId}),
    hits as (
      insert into task_cache_hits (ti_id, try_number, key_hash, source_ti_id, source_run_id, source_try)
      select id, try_number, ${hit.keyHash}, ${hit.source.tiId}, ${hit.source.runId}, ${hit.source.tryNumber}
      from moved),
    out as (
      insert into task_outputs (ti_id, try_number, attempt_token, value, size_bytes)
      select id, try_number, attempt_token, ${hit.value}::text::jsonb, octet_length(${hit.value}::text)
      from moved where ${hit.value}::text is not null
      on conflict do nothing),
    ev as (${insertEvents(
      sql,
      sql`select run_id, id, kind::text, payload from moved, lateral (values
        (0, ${eventKind(sql, EVENT_KIND.tiCached)}, jsonb_build_object('task_id', task_id, 'try', try_number,
          'reason', ${reason}::text, 'source_run_id', ${hit.source.runId}::bigint,
          'source_task_id', (select task_id from src), 'source_try', ${hit.source.tryNumber}::int,
          'key_hash', ${hit.keyHash}::text)),
        (1, ${eventKind(sql, EVENT_KIND.tiState)}, jsonb_build_object('task_id', task_id, 'to', 'success',
          'try', try_number, 'exit_code', 0, 'cached', true, 'reason', ${reason}::text))) e(o, kind, payload)
        order by o`,
    )})
    select id from moved`;
  return rows.count === 1;
}
