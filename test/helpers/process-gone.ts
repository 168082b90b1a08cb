import { waitFor } from './leoflow-process.js';

/**
 * Whether no process has this pid. Stricter than `isAlive`: a zombie (ended, not yet reaped) still
 * has its pid, so it is not gone.
 */
export function processGone(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return false;
  } catch {
    return true;
  }
}

/** Waits until no process has `pid` (`processGone`); throws past the timeout. */
export async function processEnds(pid: number, timeoutMs: number, what = `pid ${pid} to be gone`): Promise<void> {
  await waitFor(what, async () => processGone(pid), timeoutMs);
}
