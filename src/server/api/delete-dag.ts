import type { Logger } from 'pino';
import { actorPayload, type WriteActor } from '../../core/actor.js';
import { activeRunsOfDag } from '../../db/active-runs-of-dag.js';
import { attemptsStillRunning } from '../../db/attempts/attempts-still-running.js';
import { cancelRun } from '../../db/cancel-run.js';
import { dagExists, setDagPaused } from '../../db/dags.js';
import { removeDag } from '../../db/history/remove-dag.js';
import { addCounts, type HistoryRowCounts } from '../../db/history/remove-runs.js';
import type { Sql } from '../../db/sql.js';
import { cleanHistory } from './clean-history.js';
import { FailedPreconditionError, NotFoundError } from './errors.js';

/** A trigger racing a forced delete is cancelled too; this many times, then the delete gives up. */
const MAX_ROUNDS = 3;

export interface DeleteDagDeps {
  sql: Sql;
  logger: Logger;
  /** Stops the attempts of these task instances, wherever they run. */
  stopAttempts(tiIds: string[], reason: string): void;
  /** How long a stopped attempt may take to be recorded ended (its holder's kill grace, and some). */
  attemptsEndWithinMs: number;
}

/** How often the wait for stopped attempts looks again. */
const POLL_MS = 100;

/**
 * Deletes a DAG and all its history. Runs that have not ended refuse it, unless `force`: the DAG
 * is paused (no new scheduled runs) and those runs cancelled as `run cancel` does (their running
 * tasks are told to stop; a holder that misses it stops them at its next heartbeat, which finds
 * no attempt), then everything goes: the finished runs' history in batches, the rest and the DAG
 * in one last transaction (src/db/history/remove-dag.ts).
 */
export async function deleteDagWithHistory(
  deps: DeleteDagDeps,
  dagId: string,
  force: boolean,
  by?: WriteActor,
): Promise<{ removed: HistoryRowCounts; cancelledRunIds: string[] }> {
  if (!(await dagExists(deps.sql, dagId))) throw new NotFoundError(`DAG "${dagId}" not found`);
  const cancelledRunIds: string[] = [];
  let removed: HistoryRowCounts = { runs: 0, taskInstances: 0, events: 0, taskLogs: 0 };
  for (let round = 0; ; round++) {
    const active = await activeRunsOfDag(deps.sql, dagId);
    if (active.length > 0) {
      if (!force || round >= MAX_ROUNDS) {
        const ids = active;
        const shown = ids.length > 10 ? `${ids.slice(0, 10).join(', ')}, …` : ids.join(', ');
        throw new FailedPreconditionError(
          force
            ? `DAG "${dagId}" keeps getting new runs (${shown}); pause it and try again`
            : ids.length === 1
              ? `DAG "${dagId}" has 1 run that has not ended (${shown}): cancel it first, or force (--force) ` +
                `to cancel it and delete`
              : `DAG "${dagId}" has ${ids.length} runs that have not ended (${shown}): cancel them first, ` +
                `or force (--force) to cancel them and delete`,
        );
      }
      if (!(await setDagPaused(deps.sql, dagId, true))) throw new NotFoundError(`DAG "${dagId}" not found`);
      const stopped: string[] = [];
      for (const id of active) {
        const outcome = await cancelRun(deps.sql, id, by);
        if (outcome.kind !== 'cancelled') continue;
        if (outcome.stoppedTiIds.length > 0) deps.stopAttempts(outcome.stoppedTiIds, `DAG ${dagId} deleted`);
        stopped.push(...outcome.stoppedTiIds);
        cancelledRunIds.push(id);
      }
      deps.logger.info(
        { dagId, runIds: active, ...actorPayload(by) },
        `cancelled the runs of DAG ${dagId} that had not ended, to delete it`,
      );
      // Their holders stop the processes and record the ends, the last log lines first: removed
      // before that, the lines would be written after their task instance is gone. A holder that
      // never answers (its replica died) is not waited for past the bound; its process, if any,
      // stops at its next heartbeat, which finds no attempt.
      const deadline = Date.now() + deps.attemptsEndWithinMs;
      let running = await attemptsStillRunning(deps.sql, stopped);
      while (running.length > 0 && Date.now() < deadline) {
        await new Promise((r) => setTimeout(r, POLL_MS));
        running = await attemptsStillRunning(deps.sql, running);
      }
      if (running.length > 0)
        deps.logger.warn(
          { dagId, tiIds: running },
          'deleting a DAG whose stopped attempts were not recorded ended in time',
        );
    }
    removed = addCounts(removed, await cleanHistory(deps.sql, { dagId, dryRun: false }));
    const outcome = await removeDag(deps.sql, dagId);
    // Deleted meanwhile by another request: what this one removed is still what it removed.
    if (outcome.kind === 'not_found') return { removed, cancelledRunIds };
    if (outcome.kind === 'removed') return { removed: addCounts(removed, outcome.counts), cancelledRunIds };
  }
}
