/**
 * The contract between the dispatch pool and whatever runs an attempt. An executor receives a
 * claimed attempt and a reporter (store operations passed in, so executors never import `db`).
 */

import type { Attempt } from '../core/attempt.js';

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
   * At start, before any dispatch: takes back the attempts an earlier process of this replica
   * left running (re-attached and supervised again, or their real end recorded), and proves dead
   * those it cannot take back. Executors with nothing that outlives them have none.
   */
  adopt?(): Promise<unknown>;
  /**
   * Stops taking work and waits up to `waitMs` for live attempts to end on their own; then
   * stops the rest (reported as failed so that retries apply) and resolves when all are reported.
   */
  shutdown(waitMs: number): Promise<void>;
}
