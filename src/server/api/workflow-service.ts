import type { ServiceImpl } from '@connectrpc/connect';
import type { WorkflowService } from '../../gen/leoflow/v1/workflow_pb.js';
import { approvalHandlers } from './approval-handlers.js';
import { dagHandlers } from './dag-handlers.js';
import { eventHandlers } from './event-handlers.js';
import { historyHandlers } from './history-handlers.js';
import { mapHandlerErrors } from './map-handler-errors.js';
import { runHandlers } from './run-handlers.js';
import { watchHandlers } from './watch-handlers.js';
import type { WorkflowDeps } from './workflow-deps.js';

export type { WorkflowDeps } from './workflow-deps.js';

/**
 * The WorkflowService: DAGs, runs, history, the watch streams, events in and approvals, each in a module of its
 * handlers.
 */
export function createWorkflowService(deps: WorkflowDeps): ServiceImpl<typeof WorkflowService> {
  return mapHandlerErrors(deps.logger, {
    ...dagHandlers(deps),
    ...runHandlers(deps),
    ...historyHandlers(deps),
    ...watchHandlers(deps),
    ...eventHandlers(deps),
    ...approvalHandlers(deps),
  });
}
