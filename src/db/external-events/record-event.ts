import type { WriteActor } from '../../core/actor.js';
import type { Sql, TxSql } from '../sql.js';

/**
 * Keeps an event sent in, once per (name, sender's key): the id of the row, and whether it was
 * already there (a sender's retry), in which case nothing else is to be done for it.
 */
export async function recordEvent(
  tx: Sql | TxSql,
  e: { name: string; key: string; payload: Record<string, unknown>; by: WriteActor | undefined },
): Promise<{ id: string; duplicate: boolean }> {
  const [made] = await tx<{ id: string }[]>`
    insert into external_events (name, event_key, payload, actor)
    values (${e.name}, ${e.key}, ${tx.json(e.payload as never)}, ${e.by ? tx.json(e.by as never) : null})
    on conflict (name, event_key) do nothing
    returning id::text`;
  if (made) return { id: made.id, duplicate: false };
  const [kept] = await tx<{ id: string }[]>`
    select id::text from external_events where name = ${e.name} and event_key = ${e.key}`;
  return { id: kept!.id, duplicate: true };
}
