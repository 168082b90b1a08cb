import type { Logger } from 'pino';
import { actorPayload, type WriteActor } from '../../core/actor.js';
import type { TakenEvent } from '../../db/external-events/take-event.js';

/**
 * What a replica does with an event it took (SendEvent, a webhook), unless the sender's key was
 * taken before: it logs the event with `fields` first, and has the runs planned now that it
 * started or whose wait it ended, each once.
 */
export function announceTakenEvent(
  taken: TakenEvent,
  by: WriteActor,
  o: { logger: Logger; nudge(runIds: string[]): void },
  log: { fields: Record<string, unknown>; message: string },
): void {
  if (taken.duplicate) return;
  o.logger.info(
    {
      ...log.fields,
      eventId: taken.id,
      runs: taken.runs.map((r) => r.id),
      waitsEnded: taken.endedWaits.map((w) => w.ti_id),
      ...actorPayload(by),
    },
    log.message,
  );
  const toPlan = [...taken.runs.map((r) => r.id), ...taken.endedWaits.map((w) => w.run_id)];
  if (toPlan.length > 0) o.nudge([...new Set(toPlan)]);
}
