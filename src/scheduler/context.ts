import type { Logger } from 'pino';
import type { TaskSpec } from '../core/dag-spec.js';
import type { OfferResult } from '../dispatch/pool.js';
import type { Sql } from '../db/sql.js';

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
}

export interface SchedulerCounters {
  /** An error caught while stepping, by phase; never silently swallowed. */
  error(phase: string, err: unknown, ids?: Record<string, unknown>): void;
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
  /** At most this many active runs are planned per step (oldest first). */
  maxRunsPerStep: number;
}
