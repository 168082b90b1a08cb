import { EVENT_KIND, runEvents } from '../events/record-events.js';
import type { Sql } from '../sql.js';

export interface MarkedDeadline {
  id: string;
  dag_id: string;
  deadline_state: 'met' | 'missed';
}

/**
 * Marks up to `limit` runs whose deadline has passed, each once (`deadline_state` was null): met
 * when the run had ended by then, missed when it had not. A miss is recorded (run.deadline_missed)
 * in the same statement, and told by the trigger on the mark (migration 027): whichever leader
 * marks it, and however often leaders change, a run misses its deadline once. Reads only the due
 * runs, by index dag_runs_deadline_due.
 */
export async function markDueDeadlines(sql: Sql, limit: number): Promise<MarkedDeadline[]> {
  return sql<MarkedDeadline[]>`
    with due as (
      select id from dag_runs
       where deadline_at <= now() and deadline_state is null
       order by deadline_at
       limit ${limit}
       for update skip locked),
    marked as (
      update dag_runs r
         set deadline_state = case when r.ended_at is not null and r.ended_at <= r.deadline_at
                                   then 'met' else 'missed' end
        from due where r.id = due.id
      returning r.id, r.dag_id, r.deadline_at, r.deadline_state, r.state),
    ev as (${runEvents(
      sql,
      EVENT_KIND.runDeadlineMissed,
      sql`marked where deadline_state = 'missed'`,
      sql`jsonb_build_object('deadline_at', deadline_at, 'state', state)`,
    )})
    select id::text, dag_id, deadline_state from marked`;
}
