import type { Logger } from 'pino';
import type { Attempt, AttemptReporter, AttemptResult } from '../core/attempt.js';
import type { FinishVerdict } from './attempts/finish-attempt.js';
import { attemptInputs } from './attempts/attempt-inputs.js';
import { flushHeartbeats } from './attempts/flush-heartbeats.js';
import { isRunning } from './attempts/is-running.js';
import type { ReportBatcher } from './attempts/report-batcher.js';
import type { LogWriter } from './log-writer.js';
import { logsSoFar } from './logs.js';
import type { Sql } from './sql.js';

export interface AttemptStoreHooks {
  /** After an attempt's end was recorded (the scheduler is nudged from here). */
  onFinished?(attempt: Attempt, verdict: FinishVerdict): void;
  /** A report for a superseded attempt was refused. */
  onRejected?(attempt: Attempt, report: 'started' | 'finished' | 'heartbeat'): void;
  /** The output of a refused end (a zombie's) was not stored. */
  onOutputRejected?(attempt: Attempt): void;
}

/**
 * The reporter every executor writes through: each report is fenced by (ti, try, token), so a
 * zombie's report for a superseded attempt is refused and never applied.
 */
export function createAttemptStore(
  sql: Sql,
  reports: ReportBatcher,
  logs: LogWriter,
  logger: Logger,
  hooks: AttemptStoreHooks = {},
): AttemptReporter {
  return {
    async started(attempt, info) {
      // Said again for an attempt already running (re-attached after a restart): still current.
      const ok = (await reports.started(attempt, { pid: info.pid, agentId: null })) || (await isRunning(sql, attempt));
      if (!ok) {
        hooks.onRejected?.(attempt, 'started');
        logger.warn(
          { tiId: attempt.tiId, runId: attempt.runId, try: attempt.tryNumber },
          'start report refused: attempt superseded',
        );
      }
      return ok;
    },
    log(attempt, stream, line) {
      logs.write(attempt.tiId, attempt.tryNumber, attempt.attemptToken, stream, line);
    },
    async heartbeat(attempts) {
      const current = await flushHeartbeats(sql, attempts);
      for (const a of attempts) if (!current.has(a.tiId)) hooks.onRejected?.(a, 'heartbeat');
      return current;
    },
    inputs(attempt) {
      return attemptInputs(sql, attempt);
    },
    async logsSoFar(attempt) {
      const so = (await logsSoFar(sql, [attempt])).get(`${attempt.tiId}/${attempt.tryNumber}`)!;
      logs.continueAfter(attempt.tiId, attempt.tryNumber, so.lastSeq);
      return so;
    },
    async finished(attempt: Attempt, result: AttemptResult) {
      // Its log lines are written ahead of the end, with it (the report batcher sends them).
      logs.forget(attempt.tiId, attempt.tryNumber);
      // An attempt's end must not be lost to a database blip: the batcher retries it until the
      // database answers (the reaper holds off after an outage, so the attempt is not declared
      // lost meanwhile).
      const { verdict } = await reports.finished(attempt, result);
      const ids = {
        tiId: attempt.tiId,
        runId: attempt.runId,
        dagId: attempt.dagId,
        taskId: attempt.taskId,
        try: attempt.tryNumber,
      };
      if (verdict === 'rejected') {
        if (result.outcome !== 'superseded') hooks.onRejected?.(attempt, 'finished');
        if (result.output !== undefined) hooks.onOutputRejected?.(attempt);
        logger.warn({ ...ids, outcome: result.outcome }, 'finish report refused: attempt superseded');
      } else {
        logger.info(
          { ...ids, state: verdict, exitCode: result.exitCode, error: result.error ?? undefined },
          `task ${attempt.taskId} ${verdict}`,
        );
      }
      hooks.onFinished?.(attempt, verdict);
    },
  };
}
