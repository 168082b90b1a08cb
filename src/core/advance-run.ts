import type { TaskDefinition, TriggerRule } from './dag-spec.js';
import { MAX_PARALLEL_REASON, specTaskId } from './map-spec.js';
import { isTerminalTi, type TiState } from './states.js';

/**
 * The in-process state machine of the plan phase: given a run's tasks and the current state of
 * its task instances, decide what moves next. Pure, so the rules are tested without a database;
 * the caller turns the decision into guarded writes.
 */

export interface TiStateView {
  state: TiState;
  nextTryAt: Date | null;
  pendingReason: string | null;
  /** A mapped task's own instance, once expanded: how many mapped instances it has. */
  mapCount?: number | null;
}

export interface RunDecision {
  /** none → scheduled: the trigger rule is met. */
  schedule: string[];
  /** up_for_retry → scheduled: the backoff has elapsed. */
  retry: string[];
  /** none → waiting: the trigger rule is met and the task is a wait or an approval (it runs nothing). */
  wait: string[];
  /** Mapped tasks whose trigger rule is met: their mapped instances are to be made (or they end). */
  expand: string[];
  /** Mapped tasks none of whose mapped instances is left to run, as read: they may end now. */
  settle: string[];
  upstreamFailed: string[];
  skipped: string[];
  /** Waiting task instances whose pending reason changed (null clears it). */
  reasons: Map<string, string | null>;
  /** Set when, after these moves, every task instance is terminal. */
  outcome: 'success' | 'failed' | null;
  /** The earliest backoff still running, if any: when this run next needs a step. */
  nextRetryAt: Date | null;
  /** Mapped instances were left unscheduled for want of room in the dispatch pool (`MapRoom`). */
  heldForRoom: boolean;
}

/**
 * How many mapped instances a decision may newly schedule: the room in the dispatch pool, and the
 * reason the rest give meanwhile. A mapped instance scheduled past it would only be refused by the
 * pool, and offered again at every step of its run.
 */
export interface MapRoom {
  room: number;
  reason: string;
}

type Verdict = 'run' | 'upstream_failed' | 'skipped' | 'wait';

interface UpstreamCounts {
  total: number;
  done: number;
  success: number;
  failed: number;
  skipped: number;
}

/** What a trigger rule says about a task, given the states of its upstream tasks. */
export function evaluateTriggerRule(rule: TriggerRule, up: UpstreamCounts): Verdict {
  if (up.total === 0) return 'run';
  const allDone = up.done === up.total;
  switch (rule) {
    case 'all_success':
      if (up.failed > 0) return 'upstream_failed';
      if (up.skipped > 0) return 'skipped';
      return up.success === up.total ? 'run' : 'wait';
    case 'all_done':
      return allDone ? 'run' : 'wait';
    case 'one_success':
      if (up.success > 0) return 'run';
      if (!allDone) return 'wait';
      return up.skipped === up.total ? 'skipped' : 'upstream_failed';
    case 'one_failed':
      if (up.failed > 0) return 'run';
      return allDone ? 'skipped' : 'wait';
    case 'none_failed':
      if (up.failed > 0) return 'upstream_failed';
      return allDone ? 'run' : 'wait';
  }
}

function countUpstream(task: TaskDefinition, states: Map<string, TiState>): UpstreamCounts {
  const c: UpstreamCounts = { total: task.dependsOn.length, done: 0, success: 0, failed: 0, skipped: 0 };
  for (const dep of task.dependsOn) {
    const s = states.get(dep) ?? 'none';
    if (isTerminalTi(s)) c.done++;
    if (s === 'success') c.success++;
    else if (s === 'failed' || s === 'upstream_failed' || s === 'cancelled') c.failed++;
    else if (s === 'skipped') c.skipped++;
  }
  return c;
}

/** Tasks in an order where every task comes after its dependencies (the spec is acyclic). */
export function topologicalOrder(tasks: readonly TaskDefinition[]): TaskDefinition[] {
  const byId = new Map(tasks.map((t) => [t.id, t]));
  for (const t of tasks) {
    for (const d of t.dependsOn) if (!byId.has(d)) throw new Error(`task "${t.id}" depends on unknown task "${d}"`);
  }
  const indegree = new Map(tasks.map((t) => [t.id, t.dependsOn.length]));
  const downstream = new Map<string, string[]>();
  for (const t of tasks) for (const d of t.dependsOn) (downstream.get(d) ?? downstream.set(d, []).get(d)!).push(t.id);
  const ready = tasks.filter((t) => t.dependsOn.length === 0).map((t) => t.id);
  const out: TaskDefinition[] = [];
  while (ready.length > 0) {
    const id = ready.shift()!;
    out.push(byId.get(id)!);
    for (const next of downstream.get(id) ?? []) {
      const n = indegree.get(next)! - 1;
      indegree.set(next, n);
      if (n === 0) ready.push(next);
    }
  }
  if (out.length !== tasks.length) throw new Error('DAG spec has a cycle');
  return out;
}

export function advanceRun(
  tasks: readonly TaskDefinition[],
  tis: ReadonlyMap<string, TiStateView>,
  now: Date,
  mapRoom?: MapRoom,
): RunDecision {
  const d: RunDecision = {
    schedule: [],
    retry: [],
    wait: [],
    expand: [],
    settle: [],
    upstreamFailed: [],
    skipped: [],
    reasons: new Map(),
    outcome: null,
    nextRetryAt: null,
    heldForRoom: false,
  };
  /** What is left of the pool's room for mapped instances, over all the run's mapped tasks. */
  const pool = { left: mapRoom?.room ?? Number.POSITIVE_INFINITY, mapRoom };
  const states = new Map<string, TiState>();
  for (const [id, ti] of tis) states.set(id, ti.state);

  const setReason = (id: string, reason: string | null) => {
    if ((tis.get(id)?.pendingReason ?? null) !== reason) d.reasons.set(id, reason);
  };

  // Mapped instances, by their task, in item order (as read: those in flight and the next few).
  const mapped = new Map<string, string[]>();
  for (const id of tis.keys()) {
    const task = specTaskId(id);
    if (task !== id) (mapped.get(task) ?? mapped.set(task, []).get(task)!).push(id);
  }

  // In dependency order, so a failure propagates through the whole chain in one step.
  for (const task of topologicalOrder(tasks)) {
    const ti = tis.get(task.id);
    if (!ti) throw new Error(`run has no task instance for task "${task.id}"`);
    if (task.map && ti.state === 'waiting' && ti.mapCount != null) {
      advanceMapped(task, mapped.get(task.id) ?? [], tis, states, now, d, setReason, pool);
      continue;
    }
    if (ti.state === 'none') {
      const verdict = evaluateTriggerRule(task.triggerRule, countUpstream(task, states));
      if (verdict === 'run' && task.map) {
        // Its mapped instances are made (or it ends, for an empty or bad list) by the step's write.
        d.expand.push(task.id);
        states.set(task.id, 'waiting');
        d.reasons.delete(task.id);
      } else if (verdict === 'run' && (task.wait || task.approval)) {
        // Its pending reason (what it waits for) is written with the move.
        d.wait.push(task.id);
        states.set(task.id, 'waiting');
        d.reasons.delete(task.id);
      } else if (verdict === 'run') {
        d.schedule.push(task.id);
        states.set(task.id, 'scheduled');
        setReason(task.id, null);
      } else if (verdict === 'upstream_failed') {
        d.upstreamFailed.push(task.id);
        states.set(task.id, 'upstream_failed');
        setReason(task.id, null);
      } else if (verdict === 'skipped') {
        d.skipped.push(task.id);
        states.set(task.id, 'skipped');
        setReason(task.id, null);
      } else {
        setReason(task.id, 'UPSTREAM_RUNNING');
      }
    } else if (ti.state === 'up_for_retry') {
      if (ti.nextTryAt === null || ti.nextTryAt.getTime() <= now.getTime()) {
        d.retry.push(task.id);
        states.set(task.id, 'scheduled');
        setReason(task.id, null);
      } else {
        setReason(task.id, `RETRY_BACKOFF_UNTIL:${ti.nextTryAt.toISOString()}`);
        if (d.nextRetryAt === null || ti.nextTryAt < d.nextRetryAt) d.nextRetryAt = ti.nextTryAt;
      }
    }
  }

  const all = [...states.values()];
  if (all.every(isTerminalTi)) {
    d.outcome = all.some((s) => s === 'failed' || s === 'upstream_failed' || s === 'cancelled') ? 'failed' : 'success';
  }
  return d;
}

/**
 * The mapped instances of an expanded task: retries that are due, then the next ones in item order
 * while `max_parallel` has room. With none left to run as read, the task may end (`settle`): the
 * write checks that every one of them is done.
 */
function advanceMapped(
  task: TaskDefinition,
  ids: readonly string[],
  tis: ReadonlyMap<string, TiStateView>,
  states: Map<string, TiState>,
  now: Date,
  d: RunDecision,
  setReason: (id: string, reason: string | null) => void,
  pool: { left: number; mapRoom?: MapRoom },
): void {
  if (ids.length === 0) {
    d.settle.push(task.id);
    return;
  }
  let live = 0;
  const waiting: string[] = [];
  for (const id of ids) {
    const ti = tis.get(id)!;
    if (ti.state === 'none') waiting.push(id);
    else if (ti.state === 'up_for_retry') {
      live++;
      if (ti.nextTryAt === null || ti.nextTryAt.getTime() <= now.getTime()) {
        d.retry.push(id);
        states.set(id, 'scheduled');
        setReason(id, null);
      } else {
        setReason(id, `RETRY_BACKOFF_UNTIL:${ti.nextTryAt.toISOString()}`);
        if (d.nextRetryAt === null || ti.nextTryAt < d.nextRetryAt) d.nextRetryAt = ti.nextTryAt;
      }
    } else if (!isTerminalTi(ti.state)) live++;
  }
  let room = (task.map?.maxParallel ?? Number.POSITIVE_INFINITY) - live;
  for (const id of waiting.sort((a, b) => indexOf(a) - indexOf(b))) {
    if (room <= 0) setReason(id, `${MAX_PARALLEL_REASON}:${task.map!.maxParallel}`);
    else if (pool.left <= 0) {
      d.heldForRoom = true;
      setReason(id, pool.mapRoom!.reason);
    } else {
      room--;
      pool.left--;
      d.schedule.push(id);
      states.set(id, 'scheduled');
      setReason(id, null);
    }
  }
}

const indexOf = (mappedId: string): number => Number(mappedId.slice(mappedId.lastIndexOf('[') + 1, -1));

/** Exponential backoff from the task's retry_delay, doubling per try, capped. */
export function retryDelayMs(
  task: Pick<TaskDefinition, 'retryDelayMs' | 'maxRetryDelayMs'>,
  tryNumber: number,
): number {
  const exp = Math.min(Math.max(tryNumber - 1, 0), 30);
  return Math.min(task.retryDelayMs * 2 ** exp, task.maxRetryDelayMs);
}
