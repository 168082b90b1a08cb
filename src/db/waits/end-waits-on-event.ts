import { eventMatches } from '../../core/event-match.js';
import type { Sql, TxSql } from '../sql.js';
import { endWaits, waitEnds, type EndedWait } from './end-waits.js';
import { openWaitsOfEvent } from './open-waits-of-event.js';
import { bindWaitInputs } from './bind-wait-inputs.js';

/**
 * Ends every open wait on this event's name whose match holds on its payload (and its inputs): each succeeds, the
 * event's id kept on its wait row (the payload is the event's, until task outputs land). Call it in
 * the event's own transaction, so an event is kept with the waits it ended or not at all.
 */
export async function endWaitsOnEvent(
  tx: Sql | TxSql,
  e: { id: string; name: string; payload: unknown },
): Promise<EndedWait[]> {
  const open = await bindWaitInputs(tx, await openWaitsOfEvent(tx, e.name));
  const hits = open.filter((w) => eventMatches(w.match ?? undefined, e.payload));
  if (hits.length === 0) return [];
  return endWaits(
    tx,
    waitEnds(
      tx,
      hits.map((w) => ({ tiId: w.ti_id, to: 'success' as const, how: 'event' as const, eventId: e.id })),
    ),
  );
}
