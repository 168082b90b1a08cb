import pino from 'pino';
import type { WorkItem } from '../../src/core/work-item.js';
import type { Sql } from '../../src/db/sql.js';
import type { OfferResult } from '../../src/dispatch/pool.js';
import type { SchedulerContext } from '../../src/scheduler/context.js';
import { PlannerMemory } from '../../src/scheduler/planner-memory.js';
import { testDispatcher, type DispatcherScript } from './test-dispatcher.js';

/** One error a phase (or, where a test routes it here, a dispatch) reported. */
export interface PhaseError {
  phase: string;
  err: unknown;
  ids: Record<string, unknown> | undefined;
}

/** A scheduler context for tests, and what went through it. */
export interface SchedulerHarness {
  ctx: SchedulerContext;
  /** The dispatcher's script, read at each call: a test may replace a part between steps. */
  script: DispatcherScript;
  /** Every item offered, whatever the answer and wherever `offer` sent it. */
  offered: WorkItem[];
  errors: PhaseError[];
  reaped: { kind: 'run' | 'ti'; count: number }[];
  agentLost: number[];
  timedOut: number[];
  /** Every cancel a phase sent, wherever it would go. */
  cancelled: { tiId: string; reason: string }[];
  /** What `ctx.now()` reads; null: the real clock. */
  clock: { now: Date | null };
  /** What offers are answered when no `offer` is given. */
  answer: { next: OfferResult };
}

/** Any field of the context, any part of the dispatcher's script (see `schedulerHarness`). */
export type HarnessOptions = Partial<SchedulerContext> & Partial<DispatcherScript>;

const silent = pino({ level: 'silent' });

/**
 * A scheduler context on `sql` with a scripted dispatcher (test-dispatcher.ts) that records every
 * offer and answers `answer.next` (or passes it on to `offer`); errors, reaped counts and lost
 * agents are kept; the clock is `clock.now` when set. Defaults: subprocess executor only, 100 runs
 * per step, run orphan threshold 300 s, heartbeat threshold 90 s, timeout grace 15 s (cancels
 * recorded in `cancelled`), healthy since the epoch, no planner memory. `over` replaces any context
 * field or part of the dispatcher's script.
 */
export function schedulerHarness(sql: Sql, over: HarnessOptions = {}): SchedulerHarness {
  const { offer, executors, room, holdsLive, claimRoom, ...ctxOver } = over;
  const h: SchedulerHarness = {
    offered: [],
    errors: [],
    reaped: [],
    agentLost: [],
    timedOut: [],
    cancelled: [],
    clock: { now: null },
    answer: { next: 'accepted' },
    script: undefined as never,
    ctx: undefined as never,
  };
  h.script = {
    offer: (item) => {
      h.offered.push(item);
      return offer ? offer(item) : h.answer.next;
    },
    executors: executors ?? new Set(['subprocess']),
    room,
    holdsLive,
    claimRoom,
  };
  h.ctx = {
    sql,
    logger: silent,
    now: () => h.clock.now ?? new Date(),
    dispatcher: testDispatcher(h.script),
    defaultExecutor: 'subprocess',
    counters: {
      error: (phase, err, ids) => h.errors.push({ phase, err, ids }),
      reaped: (kind, count) => h.reaped.push({ kind, count }),
      agentLost: (count) => h.agentLost.push(count),
      timedOut: (count) => h.timedOut.push(count),
    },
    maxRunsPerStep: 100,
    runOrphanThresholdMs: 300_000,
    heartbeatThresholdMs: 90_000,
    timeoutGraceMs: 15_000,
    cancel: async (tiId, reason) => {
      h.cancelled.push({ tiId, reason });
    },
    health: { healthySince: new Date(0) },
    wakeAt: () => {},
    ...ctxOver,
  };
  return h;
}

/**
 * A leader's context as the server builds it for planning ahead: a memory of runs and of reads,
 * held-back DAGs, executors subprocess and agents, and room to claim subprocess work with its
 * move (100; none for agents). `over` replaces any of it.
 */
export function leaderHarness(sql: Sql, over: HarnessOptions = {}): SchedulerHarness {
  return schedulerHarness(sql, {
    executors: new Set(['subprocess', 'agents']),
    claimRoom: { room: (executor) => (executor === 'subprocess' ? 100 : 0) },
    memory: new PlannerMemory(100),
    heldBackDags: new Set(),
    ...over,
  });
}
