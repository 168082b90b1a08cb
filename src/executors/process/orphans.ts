import path from 'node:path';
import { processesMarked } from './processes-marked.js';
import { ATTEMPT_DIR_ENV } from './shim.js';

export interface Orphan {
  pid: number;
  group: number;
  attemptDir: string;
}

/**
 * Kills every task process group started under `root` that no one supervises any more: its
 * attempt's folder is gone, or was not re-attached (`keep` holds those that were). This is how a
 * restart proves an attempt it could not adopt dead before another try of it starts. Each task
 * carries its attempt's folder in its environment (shim.ts), which survives the folder itself.
 * Only Linux lists processes with their environment (/proc); elsewhere nothing is found.
 */
export function killOrphans(root: string, keep: ReadonlySet<string>): Orphan[] {
  return killGroupsOf(`${path.resolve(root)}${path.sep}`, (dir) => !keep.has(dir));
}

/**
 * Resolves once every one of `killed` is gone: SIGKILL is delivered, not yet obeyed, when
 * `kill` returns, and on a busy machine a killed task may still run for a moment. A restart
 * waits for this before it schedules, so no next try starts beside it. Throws when one outlives
 * `waitMs` (a process stuck in the kernel): the restart must not go on while it may still run.
 */
export async function orphansGone(killed: readonly Orphan[], waitMs = 10_000): Promise<void> {
  if (killed.length === 0) return;
  const pids = new Set(killed.map((o) => o.pid));
  const deadline = Date.now() + waitMs;
  for (;;) {
    // A process that has exited (a zombie included) no longer shows its environment.
    const left = processesMarked(`${ATTEMPT_DIR_ENV}=`).filter((p) => pids.has(p.pid));
    if (left.length === 0) return;
    if (Date.now() > deadline) {
      throw new Error(
        `task processes ${left.map((p) => p.pid).join(', ')} left by an earlier process ` +
          `survived SIGKILL for ${waitMs} ms`,
      );
    }
    await new Promise((r) => setTimeout(r, 10));
  }
}

/**
 * Kills every process group whose processes carry one of `dirs` as their attempt's folder: the
 * shims (and their tasks) of starts that are given up on, found by the folder the spawn helper
 * puts in their environment (spawn-helper.ts).
 */
export function killAttemptGroups(dirs: ReadonlySet<string>): Orphan[] {
  return dirs.size === 0 ? [] : killGroupsOf('', (dir) => dirs.has(dir));
}

function killGroupsOf(dirPrefix: string, chosen: (attemptDir: string) => boolean): Orphan[] {
  const found: Orphan[] = processesMarked(`${ATTEMPT_DIR_ENV}=${dirPrefix}`)
    .map(({ pid, group, mark }) => ({ pid, group, attemptDir: mark.slice(ATTEMPT_DIR_ENV.length + 1) }))
    .filter((o) => chosen(o.attemptDir));
  for (const group of new Set(found.map((o) => o.group))) {
    try {
      process.kill(-group, 'SIGKILL');
    } catch {
      // ESRCH: gone meanwhile.
    }
  }
  return found;
}
