/**
 * The one state table of Leoflow. Every write to a run or task-instance state is a guarded
 * transition `UPDATE … WHERE state = ANY(legalFrom(to))`, and `legalFrom` reads this table; no
 * other module decides which moves are legal.
 */

export const RUN_STATES = ['queued', 'running', 'success', 'failed', 'cancelled'] as const;
export type RunStateName = (typeof RUN_STATES)[number];

export const TI_STATES = [
  'none',
  'scheduled',
  'queued',
  'running',
  'success',
  'failed',
  'up_for_retry',
  'upstream_failed',
  'skipped',
  'cancelled',
  'waiting',
] as const;
export type TiState = (typeof TI_STATES)[number];

/**
 * Run transitions: from → the states it may move to.
 * - success/failed/cancelled → running when a clear (retry by hand) re-opens the run: its
 *   cleared task instances are `none` again and only a running run is planned. This is the one
 *   way out of a terminal run state, and only the clear takes it, with the run row locked
 *   (`RUN_REOPEN_FROM`); the ordinary guarded write never does (`runMoveFrom`), so a planner
 *   acting on a stale read can never resurrect a run that ended or was cancelled.
 */
const RUN_TRANSITIONS: Readonly<Record<RunStateName, readonly RunStateName[]>> = {
  queued: ['running', 'cancelled'],
  running: ['success', 'failed', 'cancelled'],
  success: ['running'],
  failed: ['running'],
  cancelled: ['running'],
};

/**
 * Task-instance transitions: from → the states it may move to.
 * - none → scheduled when its trigger rule is met, or straight to upstream_failed/skipped.
 * - none → waiting when it is mapped (`map:`) and its mapped instances were made; none → skipped
 *   (an empty list) or failed (not a list, or too long) when they cannot be.
 * - scheduled → queued when a dispatcher claims it for a new attempt (try_number + 1).
 * - queued → running when the executor has started the attempt; queued → failed/up_for_retry
 *   when the executor could not start it (e.g. the command does not exist); queued → success
 *   when the attempt ended well but its start report was lost (the result is real: keep it).
 * - running → success | failed | up_for_retry when the attempt ends.
 * - up_for_retry → scheduled when its backoff has elapsed.
 * - success/failed/upstream_failed/skipped/cancelled → none when cleared (retry by hand).
 * - none → waiting when its trigger rule is met and it is a wait or an approval (task_waits): it
 *   holds no slot, process or agent; waiting → success | failed | skipped when its event or
 *   approval arrives or its deadline passes (failed, or the DAG's `on_timeout`).
 * - any non-terminal state → cancelled when its run is cancelled.
 */
const TI_TRANSITIONS: Readonly<Record<TiState, readonly TiState[]>> = {
  none: ['scheduled', 'waiting', 'upstream_failed', 'skipped', 'failed', 'cancelled'],
  scheduled: ['queued', 'none', 'cancelled'],
  queued: ['running', 'success', 'failed', 'up_for_retry', 'scheduled', 'cancelled'],
  running: ['success', 'failed', 'up_for_retry', 'cancelled'],
  up_for_retry: ['scheduled', 'cancelled'],
  success: ['none'],
  failed: ['none'],
  upstream_failed: ['none'],
  skipped: ['none'],
  cancelled: ['none'],
  waiting: ['success', 'failed', 'skipped', 'cancelled'],
};

export const TERMINAL_TI_STATES: readonly TiState[] = ['success', 'failed', 'upstream_failed', 'skipped', 'cancelled'];
export const TERMINAL_RUN_STATES: readonly RunStateName[] = ['success', 'failed', 'cancelled'];

/**
 * States in which a task instance may hold a live process somewhere (the list of index
 * `task_instances_agent`).
 */
export const ACTIVE_TI_STATES: readonly TiState[] = ['queued', 'running'];

/** States from which an attempt's end may be recorded, whatever the outcome. */
export const ATTEMPT_END_FROM: readonly TiState[] = ACTIVE_TI_STATES.filter((s) =>
  (['success', 'failed', 'up_for_retry'] as const).every((to) => TI_TRANSITIONS[s].includes(to)),
);

export function isTerminalTi(state: TiState): boolean {
  return TERMINAL_TI_STATES.includes(state);
}

export function isTerminalRun(state: RunStateName): boolean {
  return TERMINAL_RUN_STATES.includes(state);
}

export function canTransitionTi(from: TiState, to: TiState): boolean {
  return TI_TRANSITIONS[from].includes(to);
}

export function canTransitionRun(from: RunStateName, to: RunStateName): boolean {
  return RUN_TRANSITIONS[from].includes(to);
}

function invert<S extends string>(table: Readonly<Record<S, readonly S[]>>): Record<S, S[]> {
  const out = {} as Record<S, S[]>;
  for (const from of Object.keys(table) as S[]) out[from] ??= [];
  for (const [from, tos] of Object.entries(table) as [S, readonly S[]][]) {
    for (const to of tos) (out[to] ??= []).push(from);
  }
  return out;
}

const TI_FROM = invert(TI_TRANSITIONS);
const RUN_FROM = invert(RUN_TRANSITIONS);

/** The states a task instance may be in for a guarded write to move it to `to`. */
export function legalTiFrom(to: TiState): readonly TiState[] {
  return TI_FROM[to];
}

/** The states a run may be in for a guarded write to move it to `to` (re-opens included). */
export function legalRunFrom(to: RunStateName): readonly RunStateName[] {
  return RUN_FROM[to];
}

/**
 * The states an ordinary guarded write (start, finalize, cancel) may move a run from: the legal
 * ones minus the terminal ones, since leaving a terminal state is a re-open, which only a clear
 * does (`RUN_REOPEN_FROM`).
 */
export function runMoveFrom(to: RunStateName): readonly RunStateName[] {
  return RUN_FROM[to].filter((s) => !isTerminalRun(s));
}

/** The ended states a clear may re-open a run from (→ running). */
export const RUN_REOPEN_FROM: readonly RunStateName[] = RUN_FROM.running.filter((s) => isTerminalRun(s));

export function isTiState(value: string): value is TiState {
  return (TI_STATES as readonly string[]).includes(value);
}

export function isRunState(value: string): value is RunStateName {
  return (RUN_STATES as readonly string[]).includes(value);
}

/*
 * Named sets of states for the guards the database layer writes (`WHERE state IN (…)`), so no
 * statement spells a state list of its own. Some are the predicates of partial indexes
 * (src/db/migrations): changing one of those means changing its index too.
 */

/** Runs that have not ended: the ones the planner reads (the list of index `dag_runs_active`). */
export const ACTIVE_RUN_STATES: readonly RunStateName[] = RUN_STATES.filter((s) => !isTerminalRun(s));

/** Runs waiting to start: queued until max_active_runs has room (the ordinary start's from). */
export const RUN_START_FROM: readonly RunStateName[] = runMoveFrom('running');

/**
 * Runs that have started and not ended: what max_active_runs counts (index `dag_runs_running`),
 * the runs whose task instances the planner moves and a dispatcher claims.
 */
export const STARTED_RUN_STATES: readonly RunStateName[] = ACTIVE_RUN_STATES.filter((s) => !RUN_START_FROM.includes(s));

/** The states a run may end from, to success or failed alike (the planner's end, the reaper's). */
export const RUN_END_FROM: readonly RunStateName[] = runMoveFrom('success').filter((s) =>
  runMoveFrom('failed').includes(s),
);

/**
 * Task instances claimed for an attempt that has not started: the claim waits to be delivered,
 * and may be given back (→ scheduled).
 */
export const CLAIMED_TI_STATES: readonly TiState[] = ACTIVE_TI_STATES.filter((s) => canTransitionTi(s, 'scheduled'));

/** Task instances whose attempt has started and not ended. */
export const STARTED_TI_STATES: readonly TiState[] = ACTIVE_TI_STATES.filter((s) => !CLAIMED_TI_STATES.includes(s));

/** The states an attempt's recorded end leaves its task instance in (a cancelled one included). */
export const ATTEMPT_ENDED_TI_STATES: readonly TiState[] = ['success', 'failed', 'up_for_retry', 'cancelled'];

/** Task instances waiting with no attempt (upstream, a slot, a backoff): a pending reason says why. */
export const WAITING_TI_STATES: readonly TiState[] = TI_STATES.filter(
  (s) => !isTerminalTi(s) && !ACTIVE_TI_STATES.includes(s),
);

/**
 * Task instances with work that moves on without the planner (a dispatch, an attempt, a
 * backoff): a run with one of these is not settled. The list of index `task_instances_live`.
 */
export const UNSETTLED_TI_STATES: readonly TiState[] = ['scheduled', 'queued', 'running', 'up_for_retry', 'waiting'];

/** The states a wait or an approval ends from (an event, an approval, its deadline). */
export const WAIT_END_FROM: readonly TiState[] = TI_STATES.filter(
  (s) => canTransitionTi(s, 'success') && canTransitionTi(s, 'failed') && canTransitionTi(s, 'skipped'),
);

/** A run all of whose task instances are in these states ended well (the run reaper's verdict). */
export const SUCCEEDED_TI_STATES: readonly TiState[] = ['success', 'skipped'];
