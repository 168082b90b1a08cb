import { createContextValues } from '@connectrpc/connect';
import { echo } from '../core/check-text.js';
import { LIMITS } from '../core/limits.js';
import { apiAdapter } from './api/adapter.js';
import { dashboardFiles } from './dashboard/dashboard-files.js';
import { HOOKS_PATH, hookHandler } from './hooks/hook-handler.js';
import type { ApiHandler } from './api/adapter.js';
import { checkRequestFields } from './api/check-request-fields.js';
import type { Logger } from 'pino';
import type { Sql } from '../db/sql.js';
import { AgentService } from '../gen/leoflow/v1/agent_pb.js';
import { ClusterService } from '../gen/leoflow/v1/cluster_pb.js';
import { WorkflowService } from '../gen/leoflow/v1/workflow_pb.js';
import type { Scheduler } from '../scheduler/scheduler.js';
import type { AgentFleet } from './agents/fleet.js';
import { createAgentService } from './agents/service.js';
import { createClusterService } from './api/cluster-service.js';
import type { Config } from './config/config.js';
import type { Health } from './observability/health.js';
import { roleGuard } from './auth/role-guard.js';
import { TokenService } from '../gen/leoflow/v1/token_pb.js';
import type { Metrics } from './observability/metrics.js';
import type { TokenAuthenticator } from './auth/token-authenticator.js';
import { tokenGuard } from './auth/token-guard.js';
import { WRITE_BURST_SECONDS, WriteLimiter, writeLimit } from './auth/write-limiter.js';
import { WriteShare } from './auth/write-share.js';
import type { TokenStreams } from './auth/token-streams.js';
import { createTokenService } from './api/token-service.js';
import type { DagParser } from './dags/dag-parser.js';
import { dagFilesDefining } from './dags/dag-files-defining.js';
import { clientCertificateKey, clientCertificateOf } from './auth/tls-identity.js';
import { createWorkflowService } from './api/workflow-service.js';
import { callerKey, openActorId, peerOf } from './auth/caller.js';
import { isLoopback } from './config/is-loopback.js';
import { actorPayload } from '../core/actor.js';
import type { EventFeed } from '../feed/event-feed.js';
import type { ChangeSignal } from './api/change-signal.js';

/**
 * The API's three services, on what the replica was wired with, as one HTTP/2 handler, behind
 * the guard of the replica's role.
 */
export function apiRoutes(o: {
  sql: Sql;
  logger: Logger;
  config: Config;
  auth: { required: boolean; authenticator: TokenAuthenticator; streams?: TokenStreams };
  metrics: Pick<Metrics, 'authDenied' | 'apiLimited' | 'agentsForgotten' | 'hookRefused'>;
  parser: DagParser;
  scheduler: Scheduler;
  fleet: AgentFleet;
  events: EventFeed;
  changes: ChangeSignal;
  health: Health;
  dispatchQueueDepth(): number;
}) {
  const { sql, logger, config, parser, scheduler, fleet, health } = o;
  // With mTLS on, each request carries its connection's client certificate, for the Hello check.
  const askCertificate = config.tls?.clientCa != null;
  const openActor = o.auth.required ? 'unauthenticated' : openActorId(isLoopback(config.listenHost));
  return apiAdapter({
    logger,
    // Their bodies are decoded first, so one that does not decode is INVALID_ARGUMENT (adapter.ts).
    // GET / and the dashboard's client routes: its built files (src/ui, built into dist/ui).
    // POST /hooks/NAME: webhooks made events (hooks/hook-handler.ts).
    fallback: withHooks(
      hookHandler({
        hooks: config.hooks,
        sql,
        logger,
        defaultExecutor: config.executor,
        auth: o.auth,
        openActor,
        writes: new WriteLimiter(config.maxTokenWrites, undefined, config.maxTokenWrites * WRITE_BURST_SECONDS),
        observer: config.role === 'observer',
        nudge: (runIds) => scheduler.nudge(runIds),
        refused: (hook, status) => o.metrics.hookRefused.inc({ hook, status: String(status) }),
      }),
      dashboardFiles(),
    ),
    checkedServices: new Set([WorkflowService.typeName, ClusterService.typeName, TokenService.typeName]),
    // A message past this is refused (RESOURCE_EXHAUSTED, naming the limit) before it is decoded.
    readMaxBytes: LIMITS.requestBytes,
    contextValues: (req) => {
      const values = createContextValues();
      // Who calls: the token guard puts the token's id in place of the open actor once it knows it.
      values.set(callerKey, { id: openActor, peer: peerOf(req) });
      if (askCertificate) values.set(clientCertificateKey, clientCertificateOf(req));
      return values;
    },
    // Who the caller is comes first: a replica's role is no business of an unauthenticated caller.
    interceptors: [
      ...(o.auth.required
        ? [
            tokenGuard(
              o.auth.authenticator,
              (code, rpc) => o.metrics.authDenied.inc({ code, rpc }),
              o.auth.streams,
              (rpc) => o.metrics.apiLimited.inc({ limit: 'streams', rpc }),
            ),
          ]
        : []),
      // Per replica: a client that spreads its writes over replicas gets each one's allowance.
      writeLimit(
        new WriteLimiter(config.maxTokenWrites, undefined, config.maxTokenWrites * WRITE_BURST_SECONDS),
        o.auth.required,
        (rpc, limit) => o.metrics.apiLimited.inc({ limit, rpc }),
        new WriteShare(config.maxTokenConcurrentWrites),
      ),
      roleGuard(config.role, config.replicaId),
      checkRequestFields({ idChars: LIMITS.idChars, stringChars: LIMITS.stringChars, echo }),
    ],
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
          dagFilesDefining: (dagId) =>
            dagFilesDefining(config.dags, dagId, (source, file) => parser.parse(source, file)),
          events: o.events,
          watchBufferEvents: config.watchBufferEvents,
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
          drained: (agentId, undrain, by) => {
            o.logger.info(
              { agentId, ...actorPayload(by) },
              undrain ? `agent ${agentId} undrained` : `agent ${agentId} drained`,
            );
            fleet.drain(agentId, undrain);
          },
          forgotten: (agentId, by) => {
            o.metrics.agentsForgotten.inc({ how: 'by_hand' });
            o.logger.info({ agentId, ...actorPayload(by) }, `agent ${agentId} forgotten by hand`);
          },
        }),
      );
      router.service(AgentService, createAgentService(fleet.sessionDeps));
      router.service(
        TokenService,
        createTokenService({ sql, logger, streams: o.auth.streams, authenticator: o.auth.authenticator }),
      );
    },
  });
}

/** Requests under /hooks/ to the hooks, the rest (the dashboard's files) to `rest`. */
function withHooks(hooks: ApiHandler, rest: ApiHandler): ApiHandler {
  return (req, res) => ((req.url ?? '').startsWith(HOOKS_PATH) ? hooks(req, res) : rest(req, res));
}
