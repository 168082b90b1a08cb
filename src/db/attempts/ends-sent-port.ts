import type { AttemptResult } from '../../core/attempt.js';
import type { Sql } from '../sql.js';

/** An attempt's end as sent (not yet answered: it may still be refused as stale). */
export interface EndSent {
  tiId: string;
  outcome: AttemptResult['outcome'];
}

/**
 * Told the connection a batch of ends was just sent on, before their answer. The queries it
 * `execute()`s before returning are pipelined behind the ends (Postgres runs them after the ends
 * are committed), in the same round trip; the ends settle once the promise it returns has too.
 * Null: nothing sent this time.
 */
export type EndsSentListener = (on: Sql, ends: readonly EndSent[]) => Promise<void> | null;

/**
 * Where the report batcher tells what it has just sent: the store reports the ends it sent; what
 * rides behind them is the registrant's. The store knows nothing of who listens or why, so it never
 * calls up into the scheduler. One registrant at a time: what rides behind a batch is one party's.
 */
export interface EndsSentPort {
  /** Registers the listener; returns the function that deregisters it. Throws if one is registered. */
  register(listener: EndsSentListener): () => void;
}
