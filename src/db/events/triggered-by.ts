import type { WriteActor } from '../../core/actor.js';
import type { Sql, TxSql } from '../sql.js';
import { EVENT_KIND } from './record-events.js';

/**
 * Who triggered a run through the API, from the actor its first event (`run.state` to queued)
 * records; null for a scheduled run or one triggered before actors were recorded.
 */
export async function triggeredBy(sql: Sql | TxSql, runId: string): Promise<WriteActor | null> {
  const [row] = await sql<{ id: string | null; peer: string | null }[]>`
    select payload->>'actor' as id, payload->>'peer' as peer from events
    where run_id = ${runId} and kind = ${EVENT_KIND.runState} and payload->>'to' = 'queued'
    order by seq limit 1`;
  return row?.id ? { id: row.id, peer: row.peer ?? '' } : null;
}
