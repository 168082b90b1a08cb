import type { ServiceImpl } from '@connectrpc/connect';
import type { Logger } from 'pino';
import type { WorkflowService } from '../../gen/leoflow/v1/workflow_pb.js';
import { dagHandlers } from './dag-handlers.js';
import { toConnectError } from './errors.js';
import { historyHandlers } from './history-handlers.js';
import { runHandlers } from './run-handlers.js';
import { watchHandlers } from './watch-handlers.js';
import type { WorkflowDeps } from './workflow-deps.js';

export type { WorkflowDeps } from './workflow-deps.js';

/** The WorkflowService: DAGs, runs, history and the watch streams, each in a module of its handlers. */
export function createWorkflowService(deps: WorkflowDeps): ServiceImpl<typeof WorkflowService> {
  return guarded(deps.logger, {
    ...dagHandlers(deps),
    ...runHandlers(deps),
    ...historyHandlers(deps),
    ...watchHandlers(deps),
  });
}

/** Wraps each handler so every error leaves through the one mapping, and unexpected ones are logged. */
function guarded<T extends object>(logger: Logger, impl: T): T {
  const out: Record<string, unknown> = {};
  for (const [name, fn] of Object.entries(impl) as [string, (...a: unknown[]) => unknown][]) {
    if (fn.constructor.name === 'AsyncGeneratorFunction') {
      out[name] = async function* (...args: unknown[]) {
        try {
          yield* fn(...args) as AsyncGenerator;
        } catch (err) {
          const ce = toConnectError(err);
          if (ce.code === 13) logger.error({ err, rpc: name }, 'rpc failed');
          throw ce;
        }
      };
    } else {
      out[name] = async (...args: unknown[]) => {
        try {
          return await fn(...args);
        } catch (err) {
          const ce = toConnectError(err);
          if (ce.code === 13) logger.error({ err, rpc: name }, 'rpc failed');
          throw ce;
        }
      };
    }
  }
  return out as T;
}
