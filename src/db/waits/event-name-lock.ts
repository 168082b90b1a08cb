import type { Sql, TxSql } from '../sql.js';

/**
 * The lock that closes the gap between an event and a wait starting at the same moment: an event's
 * transaction holds it shared (many events of a name go at once), and a wait's look back takes it
 * alone before reading past events. So an event whose transaction read the open waits before a new
 * wait's row was written has committed before the look back reads, and the look back sees it;
 * one that starts later sees the wait's row itself. Held to the end of the transaction.
 */
export async function lockEventName(tx: Sql | TxSql, name: string, mode: 'event' | 'look-back'): Promise<void> {
  const key = `leoflow.event:${name}`;
  if (mode === 'event') await tx`select pg_advisory_xact_lock_shared(hashtextextended(${key}, 0))`;
  else await tx`select pg_advisory_xact_lock(hashtextextended(${key}, 0))`;
}
