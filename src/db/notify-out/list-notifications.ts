import type { Sql } from '../sql.js';

export interface NotificationRow {
  id: string;
  run_id: string;
  dag_id: string;
  kind: string;
  receiver: string;
  task_id: string;
  state: string;
  attempts: number;
  last_error: string | null;
  created_at: Date;
  delivered_at: Date | null;
  next_at: Date;
}

/** Newest first, after the id `before` (a page's last), filtered by state and DAG when given. */
export async function listNotifications(
  sql: Sql,
  f: { state: string | null; dagId: string | null; limit: number; before: string | null },
): Promise<NotificationRow[]> {
  return sql<NotificationRow[]>`
    select id::text, run_id::text, dag_id, kind, receiver, task_id, state, attempts, last_error, created_at,
           delivered_at, next_at
      from notifications
     where (${f.state}::text is null or state = ${f.state})
       and (${f.dagId}::text is null or dag_id = ${f.dagId})
       and (${f.before}::bigint is null or id < ${f.before}::bigint)
     order by id desc
     limit ${f.limit}`;
}
