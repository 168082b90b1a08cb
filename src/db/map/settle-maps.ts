import { TERMINAL_TI_STATES } from '../../core/states.js';
import { EVENT_KIND, tiEvents } from '../events/record-events.js';
import type { Sql } from '../sql.js';

/**
 * Ends the mapped tasks (their own instances, by id) all of whose mapped instances are done, in one
 * statement with their events: success if every one succeeded, else failed with how many did not,
 * so a downstream's trigger rule sees the mapped set as one task. Returns the ids of the runs of
 * those ended. A task with a mapped instance still to run is left alone.
 */
export async function settleMaps(sql: Sql, tiIds: string[]): Promise<string[]> {
  if (tiIds.length === 0) return [];
  const terminal = TERMINAL_TI_STATES as string[];
  const rows = await sql<{ run_id: string }[]>`
    with p as (
      select t.id from task_instances t
      where t.id = any(${tiIds}::bigint[]) and t.state = 'waiting' and t.map_count is not null
        and not exists (select 1 from task_instances c
                        where c.map_parent = t.id and c.state <> all(${terminal}::text[]))
      for update of t),
    agg as (
      select p.id, count(*) filter (where c.state <> 'success') as bad, count(*) as n
      from p join task_instances c on c.map_parent = p.id group by p.id),
    moved as (
      update task_instances t
      set state = case when agg.bad > 0 then 'failed' else 'success' end, pending_reason = null, ended_at = now(),
          error = case when agg.bad > 0 then agg.bad || ' of ' || agg.n || ' mapped instances did not succeed' end
      from agg where t.id = agg.id
      returning t.id, t.run_id, t.task_id, t.state, t.try_number, t.error),
    ev as (${tiEvents(
      sql,
      EVENT_KIND.tiState,
      sql`moved`,
      sql`jsonb_strip_nulls(jsonb_build_object('task_id', task_id, 'to', state, 'try', try_number, 'error', error))`,
    )})
    select run_id from moved`;
  return rows.map((r) => r.run_id);
}
