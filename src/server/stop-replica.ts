import type { Logger } from 'pino';
import type { ReportBatcher } from '../db/attempts/report-batcher.js';
import type { LogWriter } from '../db/log-writer.js';
import type { Listener } from '../db/notifications.js';
import type { Dispatcher } from '../dispatch/dispatcher.js';
import type { Executor } from '../executors/executor.js';
import type { EventFeed } from '../feed/event-feed.js';
import type { Scheduler } from '../scheduler/scheduler.js';
import type { AgentFleet } from './agents/fleet.js';
import type { Database } from './database.js';
import type { StateDirLock } from './state-dir-lock.js';
import { shutdownDeadline } from './shutdown-deadline.js';

/**
 * How long a stopping replica waits for its agents to move once told to: one that honours
 * Reconnect goes within a round trip; one that does not would not go within any wait, and its
 * stream is closed with the API.
 */
const AGENTS_MOVE_WAIT_MS = 5_000;

/** At a stop, what the ends of tasks stopped at the deadline are given to be written, past their kill grace. */
const FINAL_WRITES_MS = 2_000;

interface Closable {
  close(): Promise<unknown>;
}

/** The parts of a running replica that its stop ends, in the order it ends them. */
export interface ReplicaParts {
  db: Database;
  lock: StateDirLock;
  scheduler: Scheduler;
  fleet: AgentFleet;
  dispatcher: Dispatcher;
  executors: Map<string, Executor>;
  reports: ReportBatcher;
  logs: LogWriter;
  listener: Listener;
  /** Delivers notifications (server/notify/deliverer.ts); null on an observer. */
  notifications: { stop(): Promise<void> } | null;
  spans: Closable | null;
  events: EventFeed;
  api: Closable;
  parser: Closable;
  metricsServer: Closable | null;
  tracing: Closable | null;
}

/** The stop's limits: the shutdown grace, and the kill grace a task stopped at it is given. */
export interface StopLimits {
  shutdownGraceMs: number;
  killGraceMs: number;
}

/**
 * Graceful stop, in an order that loses nothing: no more work placed here or on this replica's
 * agents; leadership released; agents sent to another replica; running subprocess tasks finish
 * (up to the shutdown grace); the listeners (LISTEN and the API) close last. `stopRetrying` is
 * aborted at the deadline: the reports retried through a database outage are then left to the
 * next start.
 */
export async function stopReplica(
  p: ReplicaParts,
  limits: StopLimits,
  logger: Logger,
  stopRetrying: AbortController,
): Promise<void> {
  logger.info('shutting down: no new work; waiting for running tasks');
  // Every wait below ends by the shutdown grace, whatever the database does (shutdown-deadline.ts).
  const d = shutdownDeadline(limits.shutdownGraceMs, logger, stopRetrying);
  p.db.stopping();
  // 1. Nothing more is placed here nor, by any replica, on this replica's agents; what
  //    was placed already is delivered, down streams that are still open.
  await d.within('the scheduler to stop', p.scheduler.stop());
  await d.within("this replica's agents to leave", p.fleet.leave());
  await d.within('the dispatch queue', p.dispatcher.close());
  // 2. Another replica leads from now on, placing on other agents only. Whatever ends
  //    here meanwhile is recorded here and nudges it over NOTIFY.
  await d.within('leadership to be released', p.scheduler.resign());
  // 3. Agents move to another replica with their attempts, while subprocess tasks end:
  //    those still running at the deadline are stopped, and get their kill grace.
  const moved = Promise.all([
    p.fleet.sendAway(Math.min(AGENTS_MOVE_WAIT_MS, d.left())),
    ...[...p.executors.values()].map((e) => e.shutdown(d.left())),
  ]);
  await d.within('running tasks to end and their ends to be recorded', moved, limits.killGraceMs + FINAL_WRITES_MS);
  await d.within('the agent streams to close', p.fleet.close());
  await d.within('attempt reports to be written', p.reports.drain());
  await d.within('task log lines to be written', p.logs.close());
  // 4. The listeners last: until now an Assign notified for an agent of this replica
  //    reaches its stream, or is given back.
  await d.within('the notification listener to close', p.listener.close());
  // A post in flight is let finish (its lease would else make another replica post it again).
  await d.within('notifications in flight', p.notifications?.stop() ?? Promise.resolve());
  // Watchers are told to reconnect elsewhere (UNAVAILABLE with their seq) before the API stops.
  await d.within('the span recorder', p.spans?.close() ?? Promise.resolve());
  p.events.close();
  await d.within('the API to close', p.api.close());
  await d.within('the DAG parser', p.parser.close());
  await d.within('the metrics listener', p.metricsServer?.close() ?? Promise.resolve());
  await d.within('the trace exporter', p.tracing?.close() ?? Promise.resolve());
  await p.db.close(Math.max(1, Math.ceil(d.left() / 1000)));
  d.done();
  p.lock.release();
  logger.info('stopped');
}
