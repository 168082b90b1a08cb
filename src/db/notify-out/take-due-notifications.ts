import type { Sql } from '../sql.js';

/** A notification to deliver now, with what its body says of the run. */
export interface DueNotification {
  id: string;
  run_id: string;
  dag_id: string;
  kind: string;
  receiver: string;
  /** The task it is about (an approval asked for); '' for the run's own kinds. */
  task_id: string;
  /** For 'approval_requested': the role that may approve, and the task's message. */
  approval: { role: string | null; message: string | null } | null;
  /** This delivery's number, from 1. */
  attempt: number;
  run_key: string;
  run_state: string;
  logical_date: Date;
  started_at: Date | null;
  ended_at: Date | null;
  /** The run's deadline; for a task's missed deadline, the task's. */
  deadline_at: Date | null;
  /** The tasks that failed, or could not run for it, at most a few. */
  failed_tasks: { task_id: string; state: string; try_number: number; error: string | null }[];
}

/** Tasks a body lists at most; the count says how many more. */
const LISTED_TASKS = 20;

/**
 * Takes up to `limit` due notifications for delivery: each is leased (its next_at moved `leaseMs`
 * ahead) and its attempt counted in the same statement, so another replica's deliverer skips it
 * meanwhile, and one whose deliverer died is taken again once the lease is over.
 */
export async function takeDueNotifications(sql: Sql, limit: number, leaseMs: number): Promise<DueNotification[]> {
  return sql<DueNotification[]>`
    with due as (
      select id from notifications
       where state = 'pending' and next_at <= now()
       order by next_at
       limit ${limit}
       for update skip locked),
    taken as (
      update notifications n
         set next_at = now() + ${leaseMs} * interval '1 millisecond', attempts = n.attempts + 1
        from due where n.id = due.id
      returning n.id, n.run_id, n.dag_id, n.kind, n.receiver, n.task_id, n.attempts)
    select t.id::text, t.run_id::text, t.dag_id, t.kind, t.receiver, t.task_id, t.attempts as attempt,
           -- The approval's role, and its message as recorded with the task's move to waiting.
           (select jsonb_build_object('role', w.role, 'message', (
                     select e.payload ->> 'message' from events e
                      where e.ti_id = w.ti_id and e.kind = 'ti.state' and e.payload ->> 'to' = 'waiting'
                      order by e.seq desc limit 1))
              from task_waits w join task_instances ti on ti.id = w.ti_id
             where t.kind = 'approval_requested' and ti.run_id = t.run_id and ti.task_id = t.task_id
               and w.kind = 'approval') as approval,
           r.run_key, r.state as run_state, r.logical_date, r.started_at, r.ended_at,
           -- A task's missed deadline gives the task's; any other the run's.
           coalesce((select ti.deadline_at from task_instances ti
                      where t.kind = 'deadline_missed' and t.task_id <> ''
                        and ti.run_id = t.run_id and ti.task_id = t.task_id), r.deadline_at) as deadline_at,
           coalesce((select jsonb_agg(f order by f.task_id) from (
                       select ti.task_id, ti.state, ti.try_number, left(ti.error, 500) as error
                         from task_instances ti
                        where ti.run_id = t.run_id and ti.state in ('failed', 'upstream_failed')
                        order by ti.task_id
                        limit ${LISTED_TASKS}) f), '[]'::jsonb) as failed_tasks
      from taken t join dag_runs r on r.id = t.run_id
     order by t.id`;
}
