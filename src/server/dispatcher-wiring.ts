import type { Logger } from 'pino';
import { claimAttempt } from '../db/attempts/claim-attempt.js';
import { releaseClaim } from '../db/attempts/release-claim.js';
import type { Sql } from '../db/sql.js';
import { createDispatcher, type Dispatcher } from '../dispatch/dispatcher.js';
import type { Placement } from '../dispatch/placement.js';
import type { Executor } from '../executors/executor.js';
import type { ReplicaTracing } from '../tracing/replica-tracing.js';
import type { Config } from './config/config.js';
import type { Metrics } from './observability/metrics.js';

/** One replica's dispatcher on its database, with its depth kept for the API's health answer. */
export function wireDispatcher(o: {
  config: Config;
  install: string;
  sql: Sql;
  executors: ReadonlyMap<string, Executor>;
  /** The agents executor's placement (its work is placed before it is claimed). */
  agentPlacement: Placement;
  metrics: Metrics;
  tracing: ReplicaTracing | null;
  logger: Logger;
}): { dispatcher: Dispatcher; queueDepth(): number } {
  const { config, sql, metrics, tracing } = o;
  metrics.dispatchQueueCapacity.set(config.dispatchQueue);
  let queueDepth = 0;
  const dispatcher = createDispatcher({
    install: o.install,
    workers: config.dispatchWorkers,
    capacity: config.dispatchQueue,
    executors: o.executors,
    placements: new Map([['agents', o.agentPlacement]]),
    store: {
      claim: (tiId, executor) => claimAttempt(sql, tiId, executor),
      release: (claim, reason) => releaseClaim(sql, claim, reason),
    },
    logger: o.logger,
    ...(tracing ? { dispatched: (d) => tracing.dispatched(d) } : {}),
    metrics: {
      dispatched: (seconds) => metrics.dispatchLatency.observe(seconds),
      atCapacity: () => metrics.dispatchAtCapacity.inc(),
      depth: (n) => {
        queueDepth = n;
        metrics.dispatchQueueDepth.set(n);
      },
    },
  });
  return { dispatcher, queueDepth: () => queueDepth };
}
