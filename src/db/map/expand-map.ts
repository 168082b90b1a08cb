import { MAPPED_REASON } from '../../core/map-spec.js';
import { EVENT_KIND, eventKind, insertEvents } from '../events/record-events.js';
import type { Sql } from '../sql.js';

/** A mapped task to expand, as the planner decided it from a read of its run at `epoch`. */
export interface MapExpansion {
  tiId: string;
  runId: string;
  epoch: string;
  taskId: string;
  upstream: string;
  path: string[];
  /** The most items the list may hold (MAX_MAP_ITEMS). */
  maxItems: number;
}

/** What became of the task: expanded into `count` mapped instances, skipped (an empty list) or failed. */
export type MapExpanded =
  { outcome: 'expanded'; count: number } | { outcome: 'skipped' | 'failed'; error: string } | { outcome: 'stale' };

/**
 * Expands a mapped task in one statement: reads the list in its upstream's successful output (the
 * one read of an output the scheduler makes), moves the task none → waiting and inserts one task
 * instance per item (`task[i]`, with the item) from that stored list, with a `ti.expanded` event,
 * so a leader killed mid-way leaves all of it or none. An empty list skips the task, a value that
 * is not a list or is too long fails it, saying why. `stale`: the task or its run moved since the read.
 */
export async function expandMap(sql: Sql, m: MapExpansion): Promise<MapExpanded> {
  const over = [m.upstream, ...m.path].join('.');
  const what = `task "${m.taskId}": map over "${over}"`;
  const [row] = await sql<{ verdict: string; n: number | null; kind: string | null }[]>`
    with p as (
      select t.* from task_instances t join dag_runs r on r.id = t.run_id
      where t.id = ${m.tiId} and t.state = 'none' and r.plan_epoch = ${m.epoch} and r.state = 'running'
        and r.poison_error is null
      for update of t),
    src as (
      select o.value #> ${m.path}::text[] as list
      from task_instances u
      join task_outputs o on o.ti_id = u.id and o.try_number = u.try_number and o.attempt_token = u.attempt_token
      where u.run_id = ${m.runId} and u.task_id = ${m.upstream} and u.state = 'success'),
    v as (
      select p.*, s.list, jsonb_typeof(s.list) as kind,
             case when jsonb_typeof(s.list) = 'array' then jsonb_array_length(s.list) end as n,
             case when s.list is null then 'missing'
                  when jsonb_typeof(s.list) <> 'array' then 'not_list'
                  when jsonb_array_length(s.list) > ${m.maxItems} then 'too_long'
                  when jsonb_array_length(s.list) = 0 then 'empty'
                  else 'ok' end as verdict,
             exists (select 1 from task_instances u join task_outputs o on o.ti_id = u.id
                       and o.try_number = u.try_number and o.attempt_token = u.attempt_token
                     where u.run_id = ${m.runId} and u.task_id = ${m.upstream}) as wrote
      from p left join src s on true),
    moved as (
      update task_instances t
      set state = case v.verdict when 'ok' then 'waiting' when 'empty' then 'skipped' else 'failed' end,
          pending_reason = case when v.verdict = 'ok' then ${MAPPED_REASON} end,
          map_count = case when v.verdict = 'ok' then v.n end,
          ended_at = case when v.verdict = 'ok' then null else now() end,
          error = case v.verdict
            when 'ok' then null
            when 'empty' then ${`${what}: the list is empty, nothing to run`}
            when 'missing' then case when v.wrote then ${`${what}: the output of "${m.upstream}" has no ${over}`}
                                     else ${`${what}: "${m.upstream}" wrote no output`} end
            when 'not_list' then ${`${what}: is `} || v.kind || ', not a list'
            else ${`${what}: a list of `} || v.n || ${` items, over the limit of ${m.maxItems}`} end
      from v where t.id = v.id
      returning t.id, t.run_id, t.task_id, t.state, t.try_number, t.error),
    made as (
      insert into task_instances (run_id, task_id, max_tries, executor, retry_delay_ms, max_retry_delay_ms, timeout_ms,
                                  map_parent, map_index, map_item)
      select v.run_id, v.task_id || '[' || (e.i - 1) || ']', v.max_tries, v.executor, v.retry_delay_ms,
             v.max_retry_delay_ms, v.timeout_ms, v.id, (e.i - 1)::int, e.item
      from v cross join lateral jsonb_array_elements(v.list) with ordinality as e(item, i)
      where v.verdict = 'ok'
      order by e.i),
    ev as (
      ${insertEvents(
        sql,
        sql`select run_id, id, ${eventKind(sql, EVENT_KIND.tiState)},
                   jsonb_strip_nulls(jsonb_build_object('task_id', task_id, 'to', state, 'try', try_number,
                                                        'error', error))
            from moved
            union all
            select run_id, id, ${eventKind(sql, EVENT_KIND.tiExpanded)},
                   jsonb_build_object('task_id', task_id, 'count', (select n from v))
            from moved where state = 'waiting'`,
      )})
    select v.verdict, v.n, v.kind from v`;
  if (!row) return { outcome: 'stale' };
  if (row.verdict === 'ok') return { outcome: 'expanded', count: row.n! };
  const [ti] = await sql<{ error: string }[]>`select error from task_instances where id = ${m.tiId}`;
  return { outcome: row.verdict === 'empty' ? 'skipped' : 'failed', error: ti?.error ?? '' };
}
