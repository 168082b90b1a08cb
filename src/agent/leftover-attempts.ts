import type { Logger } from 'pino';
import type { Attempt } from '../core/attempt.js';
import { AttemptDir } from '../executors/process/attempt-dir.js';
import { isSameProcess } from '../executors/process/process-identity.js';
import { killOrphansOfAgent } from '../executors/process/supervisor-mark.js';

/**
 * The attempts an earlier process of this agent left under their shims in `attemptsDir` (it
 * crashed or was killed), those `isHeld` says are not held already; and the tasks an earlier
 * process of this agent id left that this one cannot re-attach to (their folder is not in this
 * state directory: it was emptied, or another was given) killed, proving them gone.
 */
export async function takeLeftovers(
  attemptsDir: string,
  agentId: string,
  isHeld: (attempt: Attempt) => boolean,
  log: Logger,
): Promise<Attempt[]> {
  AttemptDir.claimRoot(attemptsDir);
  const folders = new Set<string>();
  const shims = new Set<number>();
  const left: Attempt[] = [];
  for (const dir of AttemptDir.list(attemptsDir)) {
    const attempt = dir.readAttempt();
    if (attempt === null || isHeld(attempt)) continue;
    folders.add(dir.path);
    // A shim leads its own process group.
    const shim = dir.readShim();
    if (shim !== null && isSameProcess(shim)) shims.add(shim.pid);
    left.push(attempt);
  }
  const orphans = await killOrphansOfAgent(agentId, folders, shims);
  if (orphans.killed > 0)
    log.warn(
      { killed: orphans.killed },
      'killed the tasks an earlier process of this agent left and this state directory does not hold',
    );
  if (orphans.ofLiveSupervisor > 0)
    log.warn(
      { processes: orphans.ofLiveSupervisor },
      'another live process runs tasks under this agent id: left alone (give each agent its own --id)',
    );
  return left;
}
