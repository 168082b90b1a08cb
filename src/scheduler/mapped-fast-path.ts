import { parseMappedTaskId } from '../core/map-spec.js';
import { isTerminalTi } from '../core/states.js';
import type { MapRoom } from '../core/advance-run.js';
import type { ActiveRunRow } from '../db/runs.js';
import type { PlannerTi } from '../db/tis.js';
import type { SchedulerContext } from './context.js';

/**
 * Mapped tasks go through the planner's fast path like any other: their runs are kept in its
 * memory (`mappedMemory`) and planned ahead of their ends, and a decision schedules no more of a
 * list than the dispatch pool takes now (`mapRoom`), so a step costs what the pool can run, not
 * what the list holds. Every speed trick for mapped tasks is here.
 */

/** How many mapped instances a decision may newly schedule now: the room in the dispatch pool. */
export function mapRoom(ctx: SchedulerContext): MapRoom {
  return { room: ctx.dispatcher.room(), reason: ctx.dispatcher.waitReason };
}

/**
 * What the planner's memory may keep of a run with mapped tasks, as it now knows the run (`tis`):
 * the same shape a read gives (db/tis.ts: the mapped instances in flight and the lowest-indexed
 * ones still to schedule, none that are done), or null when it cannot stand for a read. A read
 * holds only a window of the instances still to schedule: while the memory knows one of them, the
 * ones it knows are the next in item order; once it has scheduled its last, only the database
 * knows what is next, and the run is read again.
 */
export function mappedMemory(run: ActiveRunRow, tis: PlannerTi[]): PlannerTi[] | null {
  if (!run.spec.tasks.some((t) => t.map)) return tis;
  const kept: PlannerTi[] = [];
  /** Mapped tasks of which the memory knows an instance still to schedule. */
  const known = new Set<string>();
  for (const ti of tis) {
    const m = parseMappedTaskId(ti.task_id);
    // Done mapped instances are not read either (a 100,000-item map would be a 100,000-row read).
    if (m && isTerminalTi(ti.state)) continue;
    kept.push(ti);
    if (m && ti.state === 'none') known.add(m.task);
  }
  // An expanded task with none known to schedule: what is next (or that it may end) only a read says.
  for (const ti of tis) if (ti.map_count != null && ti.state === 'waiting' && !known.has(ti.task_id)) return null;
  return kept;
}
