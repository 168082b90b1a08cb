import { inlineLiterals } from '../inline-literals.js';
import type { Fragment, Sql, TxSql } from '../sql.js';

/** The kinds of rows in `events`, the append-only log of every state change. */
export const EVENT_KIND = {
  /** A task instance moved: `{ task_id, to, try, … }`. */
  tiState: 'ti.state',
  /** Why a task instance waits changed: `{ task_id, try, reason }` (reason null: it no longer waits for a reason). */
  tiPending: 'ti.pending',
  /** A task instance ended from the completion cache: `{ task_id, try, reason, source_run_id, source_task_id,
   *  source_try, key_hash }`. */
  tiCached: 'ti.cached',
  /** A task instance's attempt stored an output: `{ task_id, try, size_bytes }`. */
  tiOutput: 'ti.output',
  /** A mapped task's instances were made: `{ task_id, count }` (`task_id[0]` … `task_id[count−1]`). */
  tiExpanded: 'ti.expanded',
  /** A run moved: `{ to, … }`. */
  runState: 'run.state',
  /** A run had not ended by its deadline (`deadline:`): `{ deadline_at, state }`, once. */
  runDeadlineMissed: 'run.deadline_missed',
  /** A task had not ended by its deadline (`deadline:` on the task): `{ task_id, deadline_at, state }`, once. */
  taskDeadlineMissed: 'task.deadline_missed',
  /** Advancing a run threw, and the planner skips it from now on: `{ error }`. */
  runPoisoned: 'run.poisoned',
  /** A DAG was stored: `{ dag_id, version }`. */
  dagApplied: 'dag.applied',
} as const;

export type EventKind = (typeof EVENT_KIND)[keyof typeof EVENT_KIND];

/** A kind in a statement's text, for event rows built by hand (`insertEvents`). */
export function eventKind(sql: Sql | TxSql, kind: EventKind): Fragment {
  return inlineLiterals(sql, kind);
}

/**
 * The one insert into `events`, to embed in the statement that makes the change (a CTE, or the
 * statement's last part), so a change and its record are one write. `rows` is a `select` or
 * `values` of (run_id, ti_id, kind, payload), in the order the events are to be recorded.
 */
export function insertEvents(sql: Sql | TxSql, rows: Fragment): Fragment {
  return sql`insert into events (run_id, ti_id, kind, payload) ${rows}`;
}

/** One event of `kind` for each row of `from`, a task instance's (with its `id` and `run_id`). */
export function tiEvents(sql: Sql | TxSql, kind: EventKind, from: Fragment, payload: Fragment): Fragment {
  return insertEvents(sql, sql`select run_id, id, ${eventKind(sql, kind)}, ${payload} from ${from}`);
}

/** One event of `kind` for each row of `from`, a run's (with its `id`). */
export function runEvents(sql: Sql | TxSql, kind: EventKind, from: Fragment, payload: Fragment): Fragment {
  return insertEvents(sql, sql`select id, null::bigint, ${eventKind(sql, kind)}, ${payload} from ${from}`);
}

/** A `ti.pending` event for each row of `from`: task instances with their new `pending_reason`. */
export function pendingReasonEvents(sql: Sql | TxSql, from: Fragment): Fragment {
  const payload = sql`jsonb_build_object('task_id', task_id, 'try', try_number, 'reason', pending_reason)`;
  return tiEvents(sql, EVENT_KIND.tiPending, from, payload);
}
