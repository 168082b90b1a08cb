import type { EventMatch } from '../../core/event-match.js';
import type { Sql, TxSql } from '../sql.js';

/** An open wait on an event, with its match (matched in memory: see core/event-match.ts). */
export interface OpenWait {
  ti_id: string;
  match: EventMatch | null;
}

/**
 * The open waits on events of this name, by the partial index task_waits_open_event: an event
 * reads only the waits on its own name, however many others wait.
 */
export async function openWaitsOfEvent(tx: Sql | TxSql, name: string): Promise<OpenWait[]> {
  return tx<OpenWait[]>`
    select ti_id::text, match from task_waits
    where event = ${name} and ended_at is null and kind = 'event'
    order by ti_id`;
}
