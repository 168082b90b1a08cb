import type { Logger } from 'pino';
import type { Attempt, AttemptReporter, LogStream } from '../executor.js';
import { AttemptDir } from '../process/attempt-dir.js';
import { killOrphans, orphansGone } from '../process/orphans.js';
import { ShimProcess } from '../process/shim-process.js';
import type { HeartbeatLoop } from './heartbeat-loop.js';
import { describeExit } from './running.js';
import type { RunningAttempts } from './running-attempts.js';

/**
 * After a crash or a restart, the attempts an earlier process left in the attempts folder: its
 * own file because it runs once, before any new work, and reads like a recovery procedure.
 */

/** What `adopt` found in the attempts folder after a restart. */
export interface Adopted {
  /** Still running under their shim: supervised here again, as the same try. */
  reattached: number;
  /** Ended while no one watched: their real outcome recorded now. */
  recorded: number;
  /** Attempts no one could re-attach to whose task processes were found running, and killed. */
  killed: number;
}

export interface ProcessAdoptContext {
  /** The attempts folder (`<state dir>/attempts`). */
  root: string;
  runs: RunningAttempts;
  heartbeat: HeartbeatLoop;
  reporter: AttemptReporter;
  logger: Logger;
}

/**
 * After a restart, before any new work: re-attaches to every shim still running in the attempts
 * folder and supervises it again as the same try (or stops it, when the store says it is no
 * longer current), records the real outcome of each attempt that ended meanwhile, with its log
 * made whole, and kills the task processes of any attempt whose folder is gone.
 */
export async function adoptAttempts(c: ProcessAdoptContext): Promise<Adopted> {
  AttemptDir.claimRoot(c.root);
  const found: Adopted = { reattached: 0, recorded: 0, killed: 0 };
  const kept = new Set<string>();
  for (const dir of AttemptDir.list(c.root)) {
    const attempt = dir.readAttempt();
    if (attempt === null || c.runs.has(attempt.tiId)) continue;
    kept.add(dir.path);
    try {
      if (await adoptOne(c, attempt, dir)) found.reattached++;
      else found.recorded++;
    } catch (err) {
      // Left for the next start (or the heartbeat reaper): nothing was recorded wrongly.
      c.runs.logError(attempt, err, 'could not adopt an attempt left by an earlier process');
    }
  }
  const orphans = killOrphans(c.root, kept);
  await orphansGone(orphans);
  found.killed = new Set(orphans.map((o) => o.attemptDir)).size;
  if (found.reattached + found.recorded + found.killed > 0)
    c.logger.info(found, 'adopted the attempts an earlier process left');
  return found;
}

async function adoptOne(c: ProcessAdoptContext, attempt: Attempt, dir: AttemptDir): Promise<boolean> {
  const skip = await c.reporter.logsSoFar(attempt);
  const run = c.runs.track(attempt, null);
  run.dir = dir;
  const onLine = (stream: LogStream, line: string) => c.runs.log(attempt, stream, line);
  const shim = ShimProcess.reattach(dir, { onLine }, skip);
  if (shim) {
    c.runs.system(run, `re-attached to pid ${shim.pid} after a restart`);
    c.runs.supervise(run, shim);
  } else {
    ShimProcess.readRest(dir, { onLine }, skip);
  }
  // Idempotent for an attempt already recorded running; moves one whose start was never
  // recorded. False: it is no longer current (reaped, cancelled or retried meanwhile).
  const current = await c.reporter.started(attempt, { pid: shim?.pid ?? null });
  run.startSettled = true;
  run.startedReport.resolve();
  if (shim) {
    if (!current)
      c.runs.stop(run, {
        outcome: 'superseded',
        error: 'attempt no longer current after a restart',
        signal: 'SIGTERM',
      });
    c.heartbeat.schedule();
    return true;
  }
  const status = dir.readStatus();
  c.runs.system(
    run,
    status
      ? `ended while no one watched: ${describeExit(status)}`
      : 'its supervisor was killed before the task ended: no exit status',
  );
  // Its real end is when the shim wrote the status, not now: the outage is not the task's time.
  c.runs.onExit(run, status, (status && dir.statusWrittenAt()) ?? undefined);
  return false;
}
