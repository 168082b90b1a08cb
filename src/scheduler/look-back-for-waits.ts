import { eventMatches } from '../core/event-match.js';
import { endWaits, waitEnds } from '../db/waits/end-waits.js';
import { eventsForLookBack } from '../db/waits/look-back.js';
import { bindWaitInputs } from '../db/waits/bind-wait-inputs.js';
import type { SchedulerContext } from './context.js';
import type { DecidedRun } from './decide-run.js';

/** At most this many past events are read for one wait's look back. */
const LOOK_BACK_EVENTS = 1000;

/**
 * Once, as waits start: a wait whose DAG gives it a `look_back` ends at once on the oldest matching
 * event received within that window before it started. Only waits just started are looked at, so
 * this costs nothing per step for the waits already open. An event arriving meanwhile ends the wait
 * itself (take-event.ts); the guarded end lets only one of the two through.
 */
export async function lookBackForWaits(
  ctx: SchedulerContext,
  decided: DecidedRun[],
  started: Set<string>,
  result: { errors: number },
): Promise<void> {
  const ended: string[] = [];
  for (const d of decided) {
    for (const m of d.plan?.moves ?? []) {
      const w = m.wait;
      if (!w || !started.has(m.tiId) || w.kind !== 'event' || w.lookBackMs <= 0 || w.event === null) continue;
      try {
        const past = await eventsForLookBack(ctx.sql, m.tiId, w.event, w.lookBackMs, LOOK_BACK_EVENTS);
        if (past.length === 0) continue;
        const [bound] = await bindWaitInputs(ctx.sql, [{ ti_id: m.tiId, match: w.match }]);
        const hit = past.find((e) => eventMatches(bound!.match ?? undefined, e.payload));
        if (!hit) continue;
        const done = await endWaits(
          ctx.sql,
          waitEnds(ctx.sql, [
            { tiId: m.tiId, to: 'success', how: 'event', eventId: hit.id, detail: { look_back: true } },
          ]),
        );
        if (done.length > 0) ended.push(d.run.id);
      } catch (err) {
        result.errors++;
        ctx.counters.error('plan.look-back', err, { runId: d.run.id, tiId: m.tiId });
      }
    }
  }
  if (ended.length > 0) {
    ctx.memory?.forget(ended);
    ctx.nudge?.([...new Set(ended)]);
  }
}
