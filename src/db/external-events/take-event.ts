import type { WriteActor } from '../../core/actor.js';
import { eventMatches } from '../../core/event-match.js';
import { createRunOfDag, type RunRow } from '../runs.js';
import type { EndedWait } from '../waits/end-waits.js';
import { endWaitsOnEvent } from '../waits/end-waits-on-event.js';
import type { Sql } from '../sql.js';
import { dagsTriggeredBy } from './dags-triggered-by.js';
import { recordEvent } from './record-event.js';
import { runsOfEvent } from './runs-of-event.js';
import { lockEventName } from '../waits/event-name-lock.js';

/** The key of the run an event starts in each DAG it triggers: one run per event and DAG. */
export const eventRunKey = (name: string, eventId: string): string => `event__${name}__${eventId}`;

export interface TakenEvent {
  id: string;
  /** The sender's key was taken before: nothing was started now; `runs` are the first time's. */
  duplicate: boolean;
  runs: RunRow[];
  /** The waits it ended (none for a duplicate): their runs have moves to plan now. */
  endedWaits: EndedWait[];
}

/**
 * An event sent in, kept, and a run started in each DAG one of whose triggers matches it, with the
 * payload as the run's conf, and every open wait on it whose match holds ended, all in one
 * transaction: an event is either kept with its runs and ended waits or not at all, so a sender's
 * retry after any failure starts each run, and ends each wait, exactly once.
 */
export async function takeEvent(
  sql: Sql,
  e: {
    name: string;
    key: string;
    payload: Record<string, unknown>;
    by: WriteActor | undefined;
    defaultExecutor: string;
  },
): Promise<TakenEvent> {
  return sql.begin(async (tx) => {
    await lockEventName(tx, e.name, 'event');
    const kept = await recordEvent(tx, e);
    const runKey = eventRunKey(e.name, kept.id);
    if (kept.duplicate) return { ...kept, runs: await runsOfEvent(tx, runKey), endedWaits: [] };
    const endedWaits = await endWaitsOnEvent(tx, { id: kept.id, name: e.name, payload: e.payload });
    const runs: RunRow[] = [];
    for (const dag of await dagsTriggeredBy(tx, e.name)) {
      if (!dag.triggers.some((t) => t.event === e.name && eventMatches(t.match, e.payload))) continue;
      const made = await createRunOfDag(tx, {
        dagId: dag.dagId,
        runKey,
        runType: 'event',
        logicalDate: new Date(),
        conf: e.payload,
        defaultExecutor: e.defaultExecutor,
        ...(e.by ? { by: e.by } : {}),
      });
      if (made) runs.push(made.run);
    }
    return { ...kept, runs, endedWaits };
  }) as Promise<TakenEvent>;
}
