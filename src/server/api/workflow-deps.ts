import type { Logger } from 'pino';
import type { DagSpec } from '../../core/dag-spec.js';
import type { Sql } from '../../db/sql.js';
import type { EventFeed } from '../../feed/event-feed.js';
import type { RunRead } from '../../scheduler/planner-memory.js';
import type { ChangeSignal } from './change-signal.js';

/** What the WorkflowService's handlers need from the replica. */
export interface WorkflowDeps {
  sql: Sql;
  logger: Logger;
  parseDag(source: string, file: string): Promise<DagSpec>;
  /** Asks the leader to step, for these runs only when named. */
  nudge(runIds?: string[]): void;
  /** A run was triggered: asks the leader to step for it, with the run as the planner would read
   *  it (optional: without it, `nudge`). */
  runCreated?(read: RunRead): void;
  /** Stops the attempts of these task instances, wherever they run. */
  stopAttempts(tiIds: string[], reason: string): void;
  defaultExecutor: string;
  /** How long a stopped attempt may take to be recorded ended (`dag delete --force` waits for it). */
  attemptsEndWithinMs: number;
  /** Files among the server's start-up DAG paths that define this DAG (they would bring it back). */
  dagFilesDefining?(dagId: string): Promise<string[]>;
  /** This replica's feed of events to its watchers (WatchRun, WatchRuns). */
  events: EventFeed;
  /** How far a watcher may fall behind (events not yet taken by its stream) before it is cut off. */
  watchBufferEvents: number;
  /** Fired when log lines or events were written (a NOTIFY): a following TailLogs reads then. */
  changes: ChangeSignal;
}
