import type { Sql } from '../sql.js';

/** How one delivery went: the receiver's status (null: no answer) and, unless it took it, why not. */
export interface NotificationDelivery {
  id: string;
  attempt: number;
  status: number | null;
  error: string | null;
  ms: number;
  /** Delivered; else tried again after `retryInMs`, or given up when null. */
  delivered: boolean;
  retryInMs: number | null;
}

/** Records an attempt and where its notification stands now, in one statement. */
export async function recordDelivery(sql: Sql, d: NotificationDelivery): Promise<void> {
  const state = d.delivered ? 'delivered' : d.retryInMs === null ? 'failed' : 'pending';
  await sql`
    with attempt as (
      insert into notification_attempts (notification_id, status, error, ms)
      values (${d.id}, ${d.status}, ${d.error}, ${Math.round(d.ms)}))
    update notifications
       set state = ${state},
           last_error = ${d.error},
           delivered_at = case when ${d.delivered} then now() end,
           next_at = now() + ${d.retryInMs ?? 0} * interval '1 millisecond'
     where id = ${d.id} and attempts = ${d.attempt} and state = 'pending'`;
}
