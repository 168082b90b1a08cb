import type { Sql } from '../sql.js';
import { anyOpen, eventSeqName, eventsAfter, lastSeqTaken } from './read-events.js';

/** While a writer that may hold a seq is open, how often its end is looked for. */
const OPEN_CHECK_MS = 20;

const seqNames = new WeakMap<Sql, Promise<string>>();

/**
 * The last seq taken, once every transaction that could hold a seq up to it has ended: each event
 * up to it has committed or never will. A read begun after this resolves reflects all of them, so
 * a watch from it misses no later change and replays none the read shows. (A seq is taken at
 * insert, not at commit, so the highest committed seq is not such a place: a lower one may commit
 * after it.) Resolves early, with null, when `stillWanted` says no.
 */
export async function settledSeq(sql: Sql, stillWanted: () => boolean = () => true): Promise<bigint | null> {
  let name = seqNames.get(sql);
  if (!name) seqNames.set(sql, (name = eventSeqName(sql)));
  const last = await lastSeqTaken(sql, await name);
  const { open } = await eventsAfter(sql, last, last);
  while (await anyOpen(sql, open)) {
    if (!stillWanted()) return null;
    await new Promise((r) => setTimeout(r, OPEN_CHECK_MS));
  }
  return stillWanted() ? last : null;
}
