import type { Sql, TxSql } from '../sql.js';

/** An event received before a wait started, for the wait's look back. */
export interface PastEvent {
  id: string;
  payload: unknown;
}

/**
 * The events of this name received within `lookBackMs` before the wait of `tiId` started (and
 * since), oldest first: the first one whose payload matches ends it. At most `limit` are read.
 */
export async function eventsForLookBack(
  sql: Sql | TxSql,
  tiId: string,
  name: string,
  lookBackMs: number,
  limit: number,
): Promise<PastEvent[]> {
  return sql<PastEvent[]>`
    select e.id::text, e.payload from task_waits w, external_events e
    where w.ti_id = ${tiId} and w.ended_at is null and e.name = ${name}
      and e.received_at >= w.started_at - ${lookBackMs} * interval '1 millisecond'
    order by e.id
    limit ${limit}`;
}
