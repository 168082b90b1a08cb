import type { AttemptResult } from '../../src/core/attempt.js';

/** What an executor reports of a task that exited 0. */
export const SUCCEEDED: AttemptResult = { exitCode: 0, signal: null, error: null, outcome: 'success' };

/** What an executor reports of a task that exited with `code` (not 0). */
export function exitedWith(code: number): AttemptResult {
  return { exitCode: code, signal: null, error: `exit code ${code}`, outcome: 'failed' };
}

/** What an executor reports of a task it stopped with SIGTERM when cancelled for `reason`. */
export function cancelledFor(reason: string): AttemptResult {
  return { exitCode: null, signal: 'SIGTERM', error: reason, outcome: 'cancelled' };
}

/** What an executor reports of a task it SIGKILLed past its timeout of `ms` (it outlived the grace). */
export function killedAtTimeout(ms: number): AttemptResult {
  return { exitCode: null, signal: 'SIGKILL', error: `timed out after ${ms} ms`, outcome: 'timed_out' };
}
