import { markDueDeadlines } from '../../db/deadlines/mark-due-deadlines.js';
import { markDueTaskDeadlines } from '../../db/deadlines/mark-due-task-deadlines.js';
import type { SchedulerContext } from '../context.js';

/** At most this many runs, and as many task instances, past their deadline are marked a step; the rest next. */
const MAX_DUE_DEADLINES = 500;

export interface CheckDeadlinesResult {
  missed: number;
  met: number;
  /** Of task deadlines (`deadline:` on a task), the same counts. */
  tasksMissed: number;
  tasksMet: number;
}

/**
 * Phase 6: runs, then task instances, whose deadline has passed are marked met or missed, once
 * each, by one statement each that reads only the due ones (db/deadlines/): those not yet due cost
 * the step nothing. A miss is an event and a notification, made by that statement. It does not
 * hold off after an outage or an election as the attempt reapers do: an end is when the database
 * recorded it, so one recorded late did end late, and a new leader tells misses at once.
 */
export async function checkDeadlines(ctx: SchedulerContext): Promise<CheckDeadlinesResult> {
  const marked = await markDueDeadlines(ctx.sql, MAX_DUE_DEADLINES);
  let missed = 0;
  for (const m of marked) {
    if (m.deadline_state !== 'missed') continue;
    missed++;
    ctx.logger.warn({ runId: m.id, dagId: m.dag_id }, `run ${m.id} of ${m.dag_id} missed its deadline`);
  }
  const tasks = await markDueTaskDeadlines(ctx.sql, MAX_DUE_DEADLINES);
  let tasksMissed = 0;
  for (const t of tasks) {
    if (t.deadline_state !== 'missed') continue;
    tasksMissed++;
    ctx.logger.warn({ runId: t.run_id, taskId: t.task_id }, `task ${t.task_id} of run ${t.run_id} missed its deadline`);
  }
  return { missed, met: marked.length - missed, tasksMissed, tasksMet: tasks.length - tasksMissed };
}
