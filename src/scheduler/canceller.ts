import type { Logger } from 'pino';
import { CHANNELS, notify } from '../db/notifications.js';
import type { Sql } from '../db/sql.js';
import type { Dispatcher } from '../dispatch/dispatcher.js';

/**
 * Stops an attempt wherever it runs. Resolves once it is stopped here or the notification is sent
 * (never rejects): notifications arrive in the order they were sent, so a cancel awaited before
 * the next try is placed reaches the other replicas before that try's Assign does.
 */
export type CancelAttempt = (tiId: string, reason: string) => Promise<void>;

/**
 * Cancels from anywhere in this replica, for an attempt held anywhere: stopped here at once when
 * an executor of this replica holds it (a subprocess, an agent on one of its streams), else sent
 * over NOTIFY to every replica, whose `notified` stops it if one of its executors does. The
 * holder's next heartbeat would stop it too; this makes it milliseconds, not an interval.
 */
export function createCanceller(o: { sql: Sql; logger: Logger; dispatcher: Dispatcher }): {
  cancel: CancelAttempt;
  notified(payload: string): void;
} {
  return {
    async cancel(tiId, reason) {
      if (o.dispatcher.cancel(tiId, reason)) return;
      await notify(o.sql, CHANNELS.cancel, `${tiId} ${reason}`).catch((err: unknown) =>
        o.logger.warn({ err, tiId }, 'could not send a cancel to the other replicas'),
      );
    },
    notified(payload) {
      const space = payload.indexOf(' ');
      const tiId = space < 0 ? payload : payload.slice(0, space);
      if (tiId !== '') o.dispatcher.cancel(tiId, space < 0 ? 'cancelled' : payload.slice(space + 1));
    },
  };
}
