import pino from 'pino';
import { parseDag } from '../../src/core/dag/parse-dag.js';
import type { Sql } from '../../src/db/sql.js';
import { createEventFeed } from '../../src/feed/event-feed.js';
import { createChangeSignal } from '../../src/server/api/change-signal.js';
import type { WorkflowDeps } from '../../src/server/api/workflow-deps.js';
import { createWorkflowService } from '../../src/server/api/workflow-service.js';

/**
 * The workflow API's handlers on `sql` alone, as a test calls them without a server: a silent
 * logger, the real DAG parser, no leader to nudge and no attempts to stop, an event feed of its
 * own, and a fresh change signal; `over` replaces any of these.
 */
export function workflowServiceOn(sql: Sql, over: Partial<WorkflowDeps> = {}) {
  const logger = over.logger ?? pino({ level: 'silent' });
  return createWorkflowService({
    sql,
    logger,
    parseDag: async (source, file) => parseDag(source, file),
    nudge: () => {},
    stopAttempts: () => {},
    attemptsEndWithinMs: 2000,
    defaultExecutor: 'subprocess',
    events: createEventFeed(sql, logger),
    watchBufferEvents: 10_000,
    changes: createChangeSignal(),
    ...over,
  });
}
