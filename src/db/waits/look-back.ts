import type { Sql } from '../sql.js';
import { lockEventName } from './event-name-lock.js';

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
  sql: Sql,
  tiId: string,
  name: string,
  lookBackMs: number,
  limit: number,
): Promise<PastEvent[]> {
  // An event whose transaction is still open (it read the open waits before this one's row was
  // written) is waited for, then read.
  return sql.begin(async (tx) => {
    await lockEventName(tx, name, 'look-back');
    return tx<PastEvent[]>`
    select e.id::text, e.payload from task_waits w, external_events e
    where w.ti_id = ${tiId} and w.ended_at is null and e.name = ${name}
      and e.received_at >= w.started_at - ${lookBackMs} * interval '1 millisecond'
    order by e.id
    limit ${limit}`;
  }) as Promise<PastEvent[]>;
}
