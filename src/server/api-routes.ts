import { connectNodeAdapter } from '@connectrpc/connect-node';
import { LIMITS } from '../core/limits.js';
import type { Logger } from 'pino';
import type { Sql } from '../db/sql.js';
import { AgentService } from '../gen/leoflow/v1/agent_pb.js';
import { ClusterService } from '../gen/leoflow/v1/cluster_pb.js';
import { WorkflowService } from '../gen/leoflow/v1/workflow_pb.js';
import type { Scheduler } from '../scheduler/scheduler.js';
import type { AgentFleet } from './agent-fleet.js';
import { createAgentService } from './agent-service.js';
import { createClusterService } from './cluster-service.js';
import type { Config } from './config.js';
import type { Health } from './health.js';
import { roleGuard } from './role-guard.js';
import type { DagParser } from './dag-parser.js';
import { dagFilesDefining } from './dag-files-defining.js';
import { createWorkflowService } from './workflow-service.js';
import type { EventFeed } from './event-feed.js';
import type { ChangeSignal } from './change-signal.js';

/**
 * The API's three services, on what the replica was wired with, as one HTTP/2 handler, behind
 * the guard of the replica's role.
 */
export function apiRoutes(o: { sql: Sql; logger: Logger; config: Config; parser: DagParser; scheduler: Scheduler; fleet: AgentFleet; events: EventFeed; changes: ChangeSignal; health: Health; dispatchQueueDepth(): number }) {
  const { sql, logger, config, parser, scheduler, fleet, health } = o;
  return connectNodeAdapter({
    // A message past this is refused (RESOURCE_EXHAUSTED, naming the limit) before it is parsed.
    readMaxBytes: LIMITS.requestBytes,
    interceptors: [roleGuard(config.role, config.replicaId)],
    routes(router) {
      router.service(
        WorkflowService,
        createWorkflowService({
          sql,
          logger,
          parseDag: (source, file) => parser.parse(source, file),
          nudge: (runIds) => scheduler.nudge(runIds),
          runCreated: (read) => scheduler.runCreated(read),
          // An attempt held here is stopped at once; one held elsewhere, through its replica.
          stopAttempts: (tiIds, reason) => {
            for (const id of tiIds) void scheduler.cancel(id, reason);
          },
          defaultExecutor: config.executor,
          // The holder's kill grace, the output read after the exit (2 s) and the report's way here.
          attemptsEndWithinMs: config.killGraceMs + 5_000,
          dagFilesDefining: (dagId) => dagFilesDefining(config.dags, dagId, (source, file) => parser.parse(source, file)),
          events: o.events,
          changes: o.changes,
        }),
      );
      router.service(
        ClusterService,
        createClusterService({
          sql,
          replicaId: config.replicaId,
          edition: config.edition,
          role: config.role,
          leader: scheduler.leader,
          health,
          agentFreshMs: 3 * config.heartbeatIntervalMs,
          heartbeatThresholdMs: config.heartbeatThresholdMs,
          tickMs: config.tickMs,
          dispatchQueue: () => ({ depth: o.dispatchQueueDepth(), capacity: config.dispatchQueue }),
          lastFullStepAt: () => scheduler.loopProgress().lastFullAt,
          drained: (agentId) => fleet.drain(agentId),
        }),
      );
      router.service(AgentService, createAgentService(fleet.sessionDeps));
    },
  });
}
