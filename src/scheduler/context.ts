import type { Logger } from 'pino';
import type { Dispatcher } from '../dispatch/dispatcher.js';
import type { Sql } from '../db/sql.js';
import type { CancelAttempt } from './canceller.js';
import type { PlannerMemory } from './planner-memory.js';
import type { RoomWaiters } from './room-waiters.js';

/** What the scheduler counts (Prometheus in production, plain counters in tests). */
export interface SchedulerCounters {
  /** An error caught while stepping, by phase; never silently swallowed. */
  error(phase: string, err: unknown, ids?: Record<string, unknown>): void;
  /** Runs finalized or attempts ended by a reaper. */
  reaped(kind: 'run' | 'ti', count: number): void;
  /** Of the attempts reaped, those whose holder was lost (no heartbeat). */
  agentLost(count: number): void;
  /** Of the attempts reaped, those ended because they ran past their timeout. */
  timedOut(count: number): void;
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
  /** Where scheduled TIs go: the pool, the executors, claims and placement (one object). */
  dispatcher: Dispatcher;
  /** The executor of a task declared `executor: default`. */
  defaultExecutor: string;
  counters: SchedulerCounters;
  /** At most this many active runs are planned per step (see plan.ts). */
  maxRunsPerStep: number;
  /** A full step's sweep reads this many running runs on from `sweep.cursor` (see plan.ts). */
  sweepRunsPerStep?: number;
  /** A running run with nothing in flight for this long is finalized by the run reaper. */
  runOrphanThresholdMs: number;
  /** A queued/running attempt without a sign of life for this long is reaped. */
  heartbeatThresholdMs: number;
  /**
   * A running attempt this long past its timeout is ended by the leader: its holder was told the
   * timeout and should have stopped it (SIGTERM, the kill grace, SIGKILL) and reported the end.
   */
  timeoutGraceMs: number;
  /** Stops an attempt wherever its holder is (here at once, elsewhere over NOTIFY). */
  cancel: CancelAttempt;
  health: DbHealth;
  /** Asks for a step at this time (a retry's backoff ends), so it does not wait for the tick. */
  wakeAt(at: Date): void;
  /** Asks for a step of these runs as soon as this one is over (absent: the tick). */
  nudge?(runIds: string[]): void;
  /**
   * Where the full step's sweeps of running runs go on from (the last run id each read; '0' to
   * start over): the planner's, and the orphaned-run reaper's. Absent: every full step reads
   * from the oldest, and the reaper looks at every running run.
   */
  sweep?: { cursor: string; orphansAfter?: string };
  /**
   * What the planner holds of runs between steps (optional): reads taken behind their attempts'
   * ends, what it last knew of each running run (to plan it ahead of an end), runs ended ahead.
   */
  memory?: PlannerMemory;
  /**
   * DAGs whose queued runs the planner last saw held back by max_active_runs: when a run of one
   * ends in a targeted step, its queued runs are read and started in that step. A hint kept in
   * memory (the tick starts them anyway); absent: such runs wait for the tick.
   */
  heldBackDags?: Set<string>;
  /** Runs whose TIs the full dispatch pool refused, offered again when it drains (absent: at the tick). */
  roomWaiters?: RoomWaiters;
}
