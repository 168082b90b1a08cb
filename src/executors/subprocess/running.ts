import type { Attempt, AttemptResult } from '../executor.js';
import type { AttemptDir, ExitStatus } from '../process/attempt-dir.js';
import type { ShimProcess } from '../process/shim-process.js';

/**
 * One attempt of the subprocess executor from dispatch until its process is over: the record
 * its state machine (running-attempts.ts), its heartbeat and its adoption after a restart share.
 */

type Outcome = AttemptResult['outcome'];

/** Why and how we are ending a process; the first decision wins, a later one can only hasten it. */
export interface StopRequest {
  outcome: Outcome;
  error: string;
  /** The system log line, when it should say more than `error`. */
  note?: string;
  signal: 'SIGTERM' | 'SIGKILL';
}

/** One attempt from dispatch until its process is over (exited and its output read). */
export interface Running {
  attempt: Attempt;
  process: ShimProcess | null;
  /** Its folder in the attempts folder, removed once its end is recorded. */
  dir: AttemptDir | null;
  /** Settles when `started` has, so `finished` never overtakes it in the store. */
  startedReport: Deferred;
  /** Heartbeats are sent only after `started`, or the store could not yet know the attempt. */
  startSettled: boolean;
  /** How the task ended; null while it runs. */
  exit: ExitStatus | null;
  stop: StopRequest | null;
  killSent: boolean;
  timeoutTimer: NodeJS.Timeout | null;
  graceTimer: NodeJS.Timeout | null;
  /** Set once the process is over; from then on only its `finished` report is pending. */
  over: boolean;
  /** Settles when `finished` has been reported (or its failure logged). */
  done: Deferred;
}

export interface Deferred {
  promise: Promise<void>;
  resolve: () => void;
}

export function deferred(): Deferred {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => (resolve = r));
  return { promise, resolve };
}

export function clearTimers(run: Running): void {
  for (const t of [run.timeoutTimer, run.graceTimer]) if (t) clearTimeout(t);
  run.timeoutTimer = run.graceTimer = null;
}

export function describeExit(status: ExitStatus): string {
  return status.exitCode !== null ? `exit code ${status.exitCode}` : `killed by ${status.signal}`;
}
