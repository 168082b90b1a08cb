import type { Logger } from 'pino';
import { createAttemptStore } from '../db/attempt-store.js';
import { createReportBatcher, type ReportBatcher } from '../db/attempts/report-batcher.js';
import { createLogWriter, type LogWriter } from '../db/log-writer.js';
import type { AttemptReporter } from '../core/attempt.js';
import type { Database } from './database.js';
import type { Metrics } from './observability/metrics.js';

/** How long an attempt's start and end reports are retried while the database is unreachable. */
const REPORT_RETRY_MS = 10 * 60_000;

/** Where one replica's attempts report: log lines, start and end reports, and the reporter over both. */
export interface ReplicaReporting {
  logs: LogWriter;
  reports: ReportBatcher;
  reporter: AttemptReporter;
}

/**
 * Every attempt's start and end report on this replica, from the subprocess executor and from
 * agent streams alike, is written by one group-commit batcher; `giveUp` ends the retries through
 * a database outage (a stop out of time). `finished` hears of each attempt whose end was written.
 */
export function wireReporting(
  db: Database,
  logger: Logger,
  metrics: Metrics,
  giveUp: AbortSignal,
  finished: (runId: string) => void,
): ReplicaReporting {
  const logs = createLogWriter(db.sql, logger, {
    flushMs: 50,
    maxBatch: 500,
    giveUp,
    onRejected: (n) => metrics.staleReportsRejected.inc({ report: 'log' }, n),
  });
  const reports = createReportBatcher(db.reportSql, {
    retryMs: REPORT_RETRY_MS,
    giveUp,
    logs,
    onRetry: (err) => logger.warn({ err: (err as Error).message }, 'database unreachable: retrying attempt reports'),
    observe: {
      started: (dagId, waitedS) => metrics.attemptStarted(dagId, waitedS),
      ended: (dagId, outcome, ranS) => metrics.attemptEnded(dagId, outcome, ranS),
    },
  });
  const reporter = createAttemptStore(db.sql, reports, logs, logger, {
    onFinished: (attempt) => finished(attempt.runId),
    onRejected: (_attempt, report) => metrics.staleReportsRejected.inc({ report }),
    onOutputRejected: () => metrics.staleOutputsRejected.inc({ executor: 'subprocess' }),
  });
  return { logs, reports, reporter };
}
