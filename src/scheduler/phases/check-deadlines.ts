import { markDueDeadlines } from '../../db/deadlines/mark-due-deadlines.js';
import type { SchedulerContext } from '../context.js';

/** At most this many runs past their deadline are marked per step; the rest in the next. */
const MAX_DUE_DEADLINES = 500;

export interface CheckDeadlinesResult {
  missed: number;
  met: number;
}

/**
 * Phase 6: runs whose deadline has passed are marked met or missed, once each, by one statement
 * that reads only the due ones (db/deadlines/mark-due-deadlines.ts): runs not yet due cost the step
 * nothing. A miss is an event and a notification, made by that statement. It does not hold off after
 * an outage or an election as the attempt reapers do: a run's end is when the database recorded it,
 * so one recorded late did end late, and a new leader tells misses at once.
 */
export async function checkDeadlines(ctx: SchedulerContext): Promise<CheckDeadlinesResult> {
  const marked = await markDueDeadlines(ctx.sql, MAX_DUE_DEADLINES);
  let missed = 0;
  for (const m of marked) {
    if (m.deadline_state !== 'missed') continue;
    missed++;
    ctx.logger.warn({ runId: m.id, dagId: m.dag_id }, `run ${m.id} of ${m.dag_id} missed its deadline`);
  }
  return { missed, met: marked.length - missed };
}
