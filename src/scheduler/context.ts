import type { Logger } from 'pino';
import type { TaskSpec } from '../core/dag-spec.js';
import type { OfferResult } from '../dispatch/pool.js';
import type { MoveClaim } from '../db/apply-plan.js';
import type { Sql } from '../db/sql.js';
import type { KnownRuns } from './known-runs.js';
import type { PrefetchedRuns } from './prefetched-runs.js';

/** What the dispatch pool needs to turn a scheduled TI into an attempt, read by the planner. */
export interface DispatchItem {
  tiId: string;
  runId: string;
  dagId: string;
  taskId: string;
  executor: string;
  task: TaskSpec;
  conf: Record<string, unknown>;
  logicalDate: Date;
  /** The reason the TI shows now, so a dispatcher does not write an unchanged one again. */
  pendingReason: string | null;
  /** Set when the planner claimed the TI with its move to scheduled: dispatch it as it is. */
  claim?: MoveClaim;
}

/** What the scheduler counts (Prometheus in production, plain counters in tests). */
export interface SchedulerCounters {
  /** An error caught while stepping, by phase; never silently swallowed. */
  error(phase: string, err: unknown, ids?: Record<string, unknown>): void;
  /** Runs finalized or attempts ended by a reaper. */
  reaped(kind: 'run' | 'ti', count: number): void;
  /** Of the attempts reaped, those whose holder was lost (no heartbeat). */
  agentLost(count: number): void;
}

/**
 * When the scheduler last could not reach Postgres. Heartbeats could not be written then either,
 * so the heartbeat reaper holds off until a whole threshold has passed since: a database outage
 * must never make live tasks look dead.
 */
export interface DbHealth {
  /** Since when the database has answered every step without a failure. */
  healthySince: Date;
}

/** Everything a phase may use. Phases take it as their one argument and return a small result. */
export interface SchedulerContext {
  sql: Sql;
  logger: Logger;
  now(): Date;
  /** Offers a scheduled TI to the dispatch pool; never blocks. */
  offer(item: DispatchItem): OfferResult;
  /** Executor kinds this control plane can run; a TI needing another one waits with a reason. */
  executors: ReadonlySet<string>;
  /** The executor of a task declared `executor: default`. */
  defaultExecutor: string;
  counters: SchedulerCounters;
  /** At most this many active runs are planned per step (oldest first; see plan.ts). */
  maxRunsPerStep: number;
  /** A running run with nothing in flight for this long is finalized by the run reaper. */
  runOrphanThresholdMs: number;
  /** A queued/running attempt without a sign of life for this long is reaped. */
  heartbeatThresholdMs: number;
  health: DbHealth;
  /** Asks for a step at this time (a retry's backoff ends), so it does not wait for the tick. */
  wakeAt(at: Date): void;
  /**
   * How many TIs of this executor the dispatch pool takes at once now, so the planner may claim
   * them with their move (0, or absent: never; the work of an executor that places it, like
   * agents, is claimed with its move only when `placeNow` places it). An offer of a claimed TI
   * must then be accepted, or its claim released.
   */
  claimRoom?(executor: string): number;
  /** Holds this much of the room `claimRoom` gives until the returned function is called (the
   *  claims made with their moves are offered by then): two steps never count the same room. */
  holdRoom?(n: number): () => void;
  /**
   * Places a TI of an executor that places its work (agents) at once, from the executor's current
   * view of the fleet, so the planner can claim it with its move for that agent (with room in the
   * pool, as `claimRoom` says); the slot stays taken until `placed` tells how the claim went. Null:
   * it cannot be placed now without waiting (no fresh view, older work waiting, no free slot...):
   * the TI is offered unclaimed and the executor places it as before.
   */
  placeNow?(work: { tiId: string; executor: string; task: TaskSpec }): string | null;
  /** The claim of a TI placed with `placeNow` was made (its attempt's token) or not (null). */
  placed?(agentId: string, tiId: string, attemptToken: string | null): void;
  /** Brings what `placeNow` places from up to date if it is getting old: a step reads it with the
   *  runs, at the same time (never rejects). */
  freshenPlacement?(): Promise<void>;
  /** Runs read ahead of their step, right behind their attempts' ends (optional). */
  prefetched?: PrefetchedRuns;
  /** What the planner last knew of each running run, to plan it ahead of an end (optional). */
  known?: KnownRuns;
  /**
   * DAGs whose queued runs the planner last saw held back by max_active_runs: when a run of one
   * ends in a targeted step, its queued runs are read and started in that step. A hint kept in
   * memory (the tick starts them anyway); absent: such runs wait for the tick.
   */
  heldBackDags?: Set<string>;
  /** How many more offers the dispatch pool takes now: a step asked for queued runs starts that
   *  many, or as many as it was asked for if that is more (absent: `maxRunsPerStep`). */
  offerRoom?(): number;
  /** Whether this replica itself runs this attempt now (optional: absent means "not known"). */
  heldLive?(tiId: string, attemptToken: string): boolean;
}
