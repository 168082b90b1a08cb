import { TERMINAL_TI_STATES } from '../../core/states.js';
import { EVENT_KIND, tiEvents } from '../events/record-events.js';
import { inlineLiterals } from '../inline-literals.js';
import type { Sql } from '../sql.js';

export interface MarkedTaskDeadline {
  id: string;
  run_id: string;
  task_id: string;
  deadline_state: 'met' | 'missed';
}

/**
 * Marks up to `limit` task instances whose deadline (`deadline:` on the task, from its first
 * scheduling) has passed, each once: met when the task had ended by then, missed when it had not.
 * A miss is recorded (task.deadline_missed) in the same statement and told by the trigger on the
 * mark (migration 030), so it happens once whichever leader marks it. Reads only the due task
 * instances, by index task_instances_deadline_due.
 */
export async function markDueTaskDeadlines(sql: Sql, limit: number): Promise<MarkedTaskDeadline[]> {
  return sql<MarkedTaskDeadline[]>`
    with due as (
      select id from task_instances
       where deadline_at <= now() and deadline_state is null
       order by deadline_at
       limit ${limit}
       for update skip locked),
    marked as (
      update task_instances t
         set deadline_state = case when t.state in (${inlineLiterals(sql, TERMINAL_TI_STATES)})
                                        and t.ended_at <= t.deadline_at
                                   then 'met' else 'missed' end
        from due where t.id = due.id
      returning t.id, t.run_id, t.task_id, t.deadline_at, t.deadline_state, t.state),
    ev as (${tiEvents(
      sql,
      EVENT_KIND.taskDeadlineMissed,
      sql`marked where deadline_state = 'missed'`,
      sql`jsonb_build_object('task_id', task_id, 'deadline_at', deadline_at, 'state', state)`,
    )})
    select id::text, run_id::text, task_id, deadline_state from marked`;
}
