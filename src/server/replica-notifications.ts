import type { Logger } from 'pino';
import { CHANNELS, type Channel } from '../db/notifications.js';
import type { EventFeed } from '../feed/event-feed.js';
import type { Scheduler } from '../scheduler/scheduler.js';
import type { AgentFleet } from './agents/fleet.js';
import type { ChangeSignal } from './api/change-signal.js';
import type { TokenAuthenticator } from './auth/token-authenticator.js';
import type { TokenStreams } from './auth/token-streams.js';

/** The parts of a replica a notification from another replica (or its own writes) may concern. */
export interface NotifiedParts {
  logger: Logger;
  scheduler: Scheduler;
  fleet: AgentFleet;
  events: EventFeed;
  changes: ChangeSignal;
  tokenStreams: TokenStreams;
  authenticator: TokenAuthenticator;
}

/** What the replica's one LISTEN session does with each channel's notification. */
export function replicaNotifications(p: NotifiedParts): (channel: Channel, payload: string) => void {
  return (channel, payload) => {
    if (channel === CHANNELS.nudge) {
      // Something happened on another replica, maybe an attempt ending on one of its agents:
      // this replica's view of the agents' free slots is stale.
      p.fleet.placement.invalidate();
      p.scheduler.notified(payload === '' ? undefined : payload.split(','));
    } else if (channel === CHANNELS.events) {
      p.events.notified();
      p.changes.fire(payload);
    } else if (channel === CHANNELS.logs) {
      p.changes.fire(payload);
    } else if (channel === CHANNELS.cancel) {
      // Whichever executor of this replica holds it: a subprocess, or an agent's stream.
      p.scheduler.cancelNotified(payload);
    } else if (channel === CHANNELS.tokenRevoked) {
      p.authenticator.forget(payload);
      const cut = p.tokenStreams.revoked(payload);
      if (cut > 0)
        p.logger.info(
          { tokenId: payload, streamsCut: cut },
          `API token ${payload} revoked: its streams on this replica ended`,
        );
    } else
      void p.fleet
        .onNotification(channel, payload)
        .catch((err: unknown) => p.logger.error({ err, channel, payload }, 'notification failed'));
  };
}
