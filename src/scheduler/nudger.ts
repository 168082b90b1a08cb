import type { Logger } from 'pino';
import { CHANNELS, notify } from '../db/notifications.js';
import type { Sql } from '../db/sql.js';

/** NOTIFY payloads are limited to 8000 bytes: a longer list of runs becomes "every run". */
const MAX_PAYLOAD = 7000;

/** Asks the leader to step, for these runs only when named. `finished`: attempts of theirs ended. */
export type Nudge = (runIds?: string[], cause?: 'finished') => void;

/**
 * Nudges for the leader, from anywhere in this replica: stepped here when this replica leads,
 * else sent to the leader over NOTIFY with the runs named in the payload, coalesced into one
 * notification per turn of the event loop. Any cause but `finished` also says the runs changed,
 * so a read of them taken before is not used.
 */
export function createNudger(o: {
  sql: Sql;
  logger: Logger;
  isLeader(): boolean;
  /** Steps here, for these runs (all when absent). */
  step(runIds?: string[]): void;
  /** These runs (all when absent) changed: what the planner kept of them is out of date. */
  changed(runIds?: string[]): void;
}): Nudge {
  let toNotify: { all: boolean; runIds: Set<string> } | null = null;
  return (runIds, cause) => {
    if (cause !== 'finished') o.changed(runIds);
    if (o.isLeader()) return o.step(runIds);
    if (!toNotify) {
      toNotify = { all: false, runIds: new Set() };
      setImmediate(() => {
        const n = toNotify!;
        toNotify = null;
        const ids = [...n.runIds].join(',');
        void notify(o.sql, CHANNELS.nudge, n.all || ids.length > MAX_PAYLOAD ? '' : ids).catch((err: unknown) =>
          o.logger.warn({ err }, 'could not notify the leader'),
        );
      });
    }
    if (runIds && runIds.length > 0) for (const id of runIds) toNotify.runIds.add(id);
    else toNotify.all = true;
  };
}
