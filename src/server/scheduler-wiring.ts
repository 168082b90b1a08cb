import type { Logger } from 'pino';
import { readClusterGauges } from '../db/cluster-gauges.js';
import type { ReportBatcher } from '../db/attempts/report-batcher.js';
import type { Dispatcher } from '../dispatch/dispatcher.js';
import { createScheduler, type Scheduler } from '../scheduler/scheduler.js';
import type { Config } from './config/config.js';
import type { Database } from './database.js';
import { historyCounters, schedulerCounters, type Metrics } from './observability/metrics.js';

/**
 * The least time allowed for a holder's end to reach the database once it has killed a task at
 * its timeout: a subprocess's output is read for up to 2 s after it exits, then the end is sent.
 */
const END_REPORT_MS = 5_000;

/**
 * One replica's scheduler on its database and dispatcher, its counters and gauges in `metrics`.
 * `leading` hears each change of leadership (the parts only the leader runs follow it).
 */
export function wireScheduler(o: {
  config: Config;
  db: Database;
  logger: Logger;
  dispatcher: Dispatcher;
  reports: ReportBatcher;
  metrics: Metrics;
  leading: (yes: boolean) => void;
}): Scheduler {
  const { config, db, logger, metrics } = o;
  return createScheduler({
    sql: db.sql,
    databaseUrl: db.url,
    replicaId: config.replicaId,
    logger,
    dispatcher: o.dispatcher,
    endsSent: o.reports.endsSent,
    tickMs: config.tickMs,
    leaderWatchdogMs: config.leaderWatchdogMs,
    runOrphanThresholdMs: config.runOrphanThresholdMs,
    heartbeatThresholdMs: config.heartbeatThresholdMs,
    // A holder stops a task at its timeout, kills it a kill grace later and reports the end: a
    // keepalive interval more, and never less than END_REPORT_MS, covers the report's way here.
    timeoutGraceMs: config.killGraceMs + Math.max(config.heartbeatIntervalMs, END_REPORT_MS),
    defaultExecutor: config.executor,
    counters: schedulerCounters(metrics, (phase, err, ids) =>
      logger.error({ err, phase, ...ids, component: 'scheduler' }, `scheduler error in ${phase}`),
    ),
    retentionMs: config.retentionMs,
    agentRetentionMs: config.agentRetentionMs,
    // Connected, as `agents list` says it: a stream kept alive within three intervals.
    agentLiveMs: 3 * config.heartbeatIntervalMs,
    historyCounters: historyCounters(metrics, (err, ids) =>
      logger.error({ err, ...ids, component: 'history' }, `history keeper: ${String(ids.what)} failed`),
    ),
    observe: {
      stepped: (seconds) => metrics.tickDuration.observe(seconds),
      leading: (yes) => {
        metrics.leader.set(yes ? 1 : 0);
        // One replica reports the cluster's gauges, so a sum over replicas counts each run once.
        metrics.sources.cluster = yes ? () => readClusterGauges(db.sql) : () => null;
        o.leading(yes);
      },
    },
    // A worker and an observer never lead: they serve, and leave the lock to the others.
    campaigns: config.role === 'auto' || config.role === 'leader',
  });
}
