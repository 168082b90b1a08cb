/**
 * The contract between the dispatch pool and whatever runs an attempt. An executor receives a
 * claimed attempt and a reporter (store operations passed in, so executors never import `db`).
 */

import type { Attempt } from '../core/attempt.js';
import type { TaskSpec } from '../core/dag-spec.js';
import type { WorkItem } from '../core/work-item.js';

export type { Attempt, AttemptReporter, AttemptResult, LogStream } from '../core/attempt.js';

export interface Executor {
  readonly kind: string;
  /**
   * Starts the attempt. Resolves once it has started (or failed to start and been reported);
   * never waits for the attempt to end.
   */
  dispatch(attempt: Attempt): Promise<void>;
  /** Stops a live attempt (SIGTERM, then SIGKILL after the grace period). False if not held here. */
  cancel(tiId: string, reason: string): boolean;
  /** Number of attempts held now. */
  readonly activeCount: number;
  /**
   * Whether this attempt is known alive in this process (its process runs here). The heartbeat
   * reaper never reaps such an attempt, whatever its heartbeat column says: after a database
   * outage the column can lag behind the truth.
   */
  holdsLive?(tiId: string, attemptToken: string): boolean;
  /**
   * Stops taking work and waits up to `waitMs` for live attempts to end on their own; then
   * stops the rest (reported as failed so that retries apply) and resolves when all are reported.
   */
  shutdown(waitMs: number): Promise<void>;
}

/**
 * An executor that chooses where each attempt runs before it is claimed (the agents executor):
 * the dispatcher hands it work unclaimed, and may ask it to place work at once so the planner can
 * claim it with its move.
 */
export interface PlacingExecutor extends Executor {
  /** Places, claims and delivers one TI; a TI that cannot be placed stays scheduled, saying why. */
  placeAndDispatch(item: WorkItem): Promise<unknown>;
  /** Places a TI at once from the current view, for a claim made elsewhere; null if it cannot. */
  placeNow(work: { tiId: string; task: TaskSpec }): string | null;
  /** The claim of a TI placed with `placeNow` was made (its attempt's token) or not (null). */
  placed(agentId: string, tiId: string, attemptToken: string | null): void;
  /** A claimed attempt was given back before it was delivered: its slot is free again. */
  dropped(agentId: string, attemptToken: string): void;
  /** Reads the view `placeNow` places from again if it is getting old (never rejects). */
  freshen(): Promise<void>;
  /** Whether this TI is parked here, waiting for room; `retryParked` tries the parked work again. */
  parks(tiId: string): boolean;
  retryParked(): void;
  /** Drops the parked work (this replica no longer leads). */
  forgetParked(): void;
}
