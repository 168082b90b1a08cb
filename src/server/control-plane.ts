import http2 from 'node:http2';
import type { AddressInfo } from 'node:net';
import { connectNodeAdapter } from '@connectrpc/connect-node';
import type { Logger } from 'pino';
import { createAttemptStore } from '../db/attempt-store.js';
import { claimAttempt } from '../db/attempts/claim-attempt.js';
import { releaseClaim } from '../db/attempts/release-claim.js';
import { createReportBatcher } from '../db/attempts/report-batcher.js';
import { startEmbeddedPostgres, type EmbeddedPostgres } from '../db/embedded-postgres.js';
import { createLogWriter } from '../db/log-writer.js';
import { CHANNELS, listen } from '../db/notifications.js';
import { migrate } from '../db/migrate.js';
import { createSql } from '../db/sql.js';
import { createDispatcher } from '../dispatch/dispatcher.js';
import type { Executor } from '../executors/executor.js';
import { createSubprocessExecutor } from '../executors/subprocess.js';
import { AgentService } from '../gen/leoflow/v1/agent_pb.js';
import { ClusterService } from '../gen/leoflow/v1/cluster_pb.js';
import { WorkflowService } from '../gen/leoflow/v1/workflow_pb.js';
import type { SchedulerContext } from '../scheduler/context.js';
import { createLeaderElector } from '../scheduler/leader.js';
import { registerPlanBehindEnds } from '../scheduler/plan-ahead.js';
import { PlannerMemory } from '../scheduler/planner-memory.js';
import { createSchedulerLoop } from '../scheduler/scheduler-loop.js';
import { step } from '../scheduler/step.js';
import { createAgentFleet } from './agent-fleet.js';
import { createAgentService } from './agent-service.js';
import { applyDagPaths } from './apply-dag-paths.js';
import { createClusterService } from './cluster-service.js';
import type { Config } from './config.js';
import { createDagParser } from './dag-parser.js';
import { createMetrics, schedulerCounters, serveMetrics } from './metrics.js';
import { createNudger, type Nudge } from './nudger.js';
import { createWorkflowService } from './workflow-service.js';

/** How long an attempt's start and end reports are retried while the database is unreachable. */
const REPORT_RETRY_MS = 10 * 60_000;

export interface ControlPlane {
  /** The address the API listens on (the port is the real one when 0 was asked). */
  readonly address: { host: string; port: number };
  readonly databaseUrl: string;
  /** Graceful stop: no new work, running tasks finish (up to shutdown_grace), then everything closes. */
  close(): Promise<void>;
}

/**
 * Wires one control-plane replica: store, executor, dispatch pool, scheduler loop behind the
 * leader lock, and the API. Every replica serves the API; only the leader steps.
 */
export async function startControlPlane(config: Config, logger: Logger): Promise<ControlPlane> {
  const started = performance.now();
  let embedded: EmbeddedPostgres | null = null;
  let databaseUrl = config.databaseUrl;
  if (!databaseUrl) {
    embedded = await startEmbeddedPostgres({ stateDir: config.stateDir, port: config.embeddedPgPort, logger: logger.child({ component: 'postgres' }) });
    databaseUrl = embedded.url;
    logger.info({ port: config.embeddedPgPort, dataDir: embedded.dataDir }, 'embedded Postgres ready');
  }
  // Room for every dispatch drainer plus the scheduler, the API and the heartbeats, so a burst of
  // dispatches never makes the tick wait for a connection.
  const sql = createSql(databaseUrl, { max: 10 + config.dispatchWorkers, applicationName: `leoflow-pool:${config.replicaId}` });
  // The attempt reports and what rides behind their ends: statements that find their rows by id,
  // planned once per connection instead of once per batch.
  const reportSql = createSql(databaseUrl, { max: 4, applicationName: `leoflow-reports:${config.replicaId}`, genericPlans: true });
  // The agents' claims, likewise, on a connection of their own: a report batch holds a reports
  // connection reserved until what rides behind its ends has answered, and a claim waiting for one
  // holds a freed agent slot idle (placement rounds claim one at a time, so one is enough).
  const claimSql = createSql(databaseUrl, { max: 1, applicationName: `leoflow-claims:${config.replicaId}`, genericPlans: true });
  const endPools = (timeout: number) => Promise.all([sql, reportSql, claimSql].map((pool) => pool.end({ timeout }).catch(() => {})));
  const cleanups: (() => Promise<unknown>)[] = [];
  try {
    await migrate(sql, logger);

    const metrics = createMetrics();
    const logs = createLogWriter(sql, logger, { flushMs: 50, maxBatch: 500, onRejected: (n) => metrics.staleReportsRejected.inc({ report: 'log' }, n) });
    // Every attempt's start and end report on this replica, from the subprocess executor and from
    // agent streams alike, is written by one group-commit batcher.
    const MAX_RUNS_PER_STEP = 1000;
    const memory = new PlannerMemory(MAX_RUNS_PER_STEP);
    let isLeader = false;
    let stopping = false;
    const reports = createReportBatcher(reportSql, {
      retryMs: REPORT_RETRY_MS,
      logs,
      onRetry: (err) => logger.warn({ err: (err as Error).message }, 'database unreachable: retrying attempt reports'),
    });
    // Set once the loop exists: asks the leader, here or on another replica, to step. `finished`:
    // attempts of these runs ended (and their runs may have been read right behind the write);
    // any other cause marks the runs changed, so a read taken before is not used.
    let nudge: Nudge = () => {};
    const reporter = createAttemptStore(sql, reports, logs, logger, {
      onFinished: (attempt) => nudge([attempt.runId], 'finished'),
      onRejected: (_attempt, report) => metrics.staleReportsRejected.inc({ report }),
    });
    const fleet = createAgentFleet({
      sql,
      claimSql,
      logs,
      reports,
      logger,
      metrics,
      replicaId: config.replicaId,
      keepaliveMs: config.heartbeatIntervalMs,
      agentToken: config.agentToken,
      nudge: (runIds, cause) => nudge(runIds, cause),
      // Only the leader places work, so only the leader's agents executor is ever hungry.
      nudgeQueued: (atLeast) => isLeader && loop.nudgeQueued(atLeast),
    });
    const executors = new Map<string, Executor>();
    executors.set(
      'subprocess',
      createSubprocessExecutor({
        reporter,
        logger: logger.child({ executor: 'subprocess' }),
        killGraceMs: config.killGraceMs,
        heartbeatIntervalMs: config.heartbeatIntervalMs,
        onStart: (how) => metrics.taskStarts.inc({ how: how === 'ready-shell' ? 'ready_shell' : 'spawn' }),
      }),
    );
    executors.set('agents', fleet.executor);

    const dispatcher = createDispatcher({
      workers: config.dispatchWorkers,
      capacity: config.dispatchQueue,
      executors,
      placements: new Map([['agents', fleet.placement]]),
      store: { claim: (tiId, executor) => claimAttempt(sql, tiId, executor), release: (claim, reason) => releaseClaim(sql, claim, reason) },
      logger,
      metrics: {
        dispatched: (seconds) => metrics.dispatchLatency.observe(seconds),
        atCapacity: () => metrics.dispatchAtCapacity.inc(),
        depth: (n) => metrics.dispatchQueueDepth.set(n),
      },
      // TIs the full pool refused are offered again once it has drained, without waiting for the tick.
      onRoom: () => loop.nudge(),
    });

    const schedLogger = logger.child({ component: 'scheduler' });
    const ctx: SchedulerContext = {
      sql,
      logger: schedLogger,
      now: () => new Date(),
      dispatcher,
      defaultExecutor: config.executor,
      counters: schedulerCounters(metrics, (phase, err, ids) => schedLogger.error({ err, phase, ...ids }, `scheduler error in ${phase}`)),
      maxRunsPerStep: MAX_RUNS_PER_STEP,
      memory,
      heldBackDags: new Set(),
      runOrphanThresholdMs: config.runOrphanThresholdMs,
      heartbeatThresholdMs: config.heartbeatThresholdMs,
      health: { healthySince: new Date() },
      wakeAt: (at) => loop.wakeAt(at),
    };
    // On the leader, the plans ahead of the ends the batcher writes and the reads of their runs,
    // for the step that follows, go in the same round trip as the ends' write.
    registerPlanBehindEnds(reports.endsSent, ctx, { leading: () => isLeader, stopping: () => stopping });

    const loop = createSchedulerLoop({
      tickMs: config.tickMs,
      logger: schedLogger,
      step: (kind, target) => step(ctx, kind, target),
      canStep: () => isLeader,
      onStepDone: (seconds) => {
        metrics.tickDuration.observe(seconds);
      },
    });
    nudge = createNudger({
      sql,
      logger,
      isLeader: () => isLeader,
      step: (runIds) => loop.nudge(runIds),
      changed: (runIds) => memory.changed(runIds),
    });
    const leader = createLeaderElector({
      databaseUrl,
      replicaId: config.replicaId,
      logger: schedLogger,
      watchdogMs: config.leaderWatchdogMs,
      retryMs: 1000,
      onElected: () => {
        // A replica that did not lead did not step, so it saw no failing phase even if Postgres
        // was down the whole time (a lost lock session is usually that): heartbeats may not have
        // been writable either. Give them a full threshold to catch up before reaping.
        ctx.health.healthySince = new Date();
        isLeader = true;
        metrics.leader.set(1);
        loop.nudge();
      },
      onDeposed: () => {
        isLeader = false;
        memory.clear();
        dispatcher.forgetParked();
        metrics.leader.set(0);
      },
    });

    const parser = createDagParser({ maxThreads: 1, timeoutMs: 10_000 });
    cleanups.push(() => parser.close());

    const routes = connectNodeAdapter({
      routes(router) {
        router.service(
          WorkflowService,
          createWorkflowService({
            sql,
            logger,
            parseDag: (source, file) => parser.parse(source, file),
            nudge: (runIds) => nudge(runIds),
            // On the leader the step plans the new run from the rows that created it.
            runCreated: (read) => {
              if (!isLeader) return nudge([read.run.id]);
              memory.keepRead(read);
              loop.nudge([read.run.id]);
            },
            stopLocal: (tiIds, reason) => {
              for (const id of tiIds) if (!dispatcher.cancel(id, reason)) fleet.cancel(id, reason);
            },
            defaultExecutor: config.executor,
            logPollMs: 200,
          }),
        );
        router.service(
          ClusterService,
          createClusterService({
            sql,
            replicaId: config.replicaId,
            edition: config.edition,
            leader,
            agentFreshMs: 3 * config.heartbeatIntervalMs,
            drained: (agentId) => fleet.drain(agentId),
          }),
        );
        router.service(AgentService, createAgentService(fleet.sessionDeps));
      },
    });
    const server = http2.createServer(routes);
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(config.listenPort, config.listenHost, () => {
        server.off('error', reject);
        resolve();
      });
    });
    const addr = server.address() as AddressInfo;
    const metricsServer = config.metricsListen ? await serveMetrics(metrics, config.metricsListen.host, config.metricsListen.port) : null;
    if (metricsServer) cleanups.push(() => metricsServer.close());
    const sessions = new Set<http2.ServerHttp2Session>();
    server.on('session', (s) => {
      sessions.add(s);
      s.on('close', () => sessions.delete(s));
    });

    if (config.dags.length > 0) {
      const applied = await applyDagPaths(config.dags, (source, file) => parser.parse(source, file), sql);
      for (const a of applied) logger.info({ dagId: a.dagId, file: a.file, outcome: a.outcome }, 'applied DAG file');
    }

    const listener = listen(databaseUrl, logger, (channel, payload) => {
      if (channel === CHANNELS.nudge) {
        // Something happened on another replica, maybe an attempt ending on one of its agents:
        // this replica's view of the agents' free slots is stale.
        fleet.placement.invalidate();
        const runIds = payload === '' ? undefined : payload.split(',');
        memory.changed(runIds);
        loop.nudge(runIds);
      }
      else void fleet.onNotification(channel, payload).catch((err: unknown) => logger.error({ err, channel, payload }, 'notification failed'));
    });
    cleanups.push(() => listener.close());

    loop.start();
    leader.start();
    logger.info(
      { listen: `${addr.address}:${addr.port}`, metrics: metricsServer ? `${metricsServer.address.address}:${metricsServer.address.port}` : 'off', edition: config.edition, replicaId: config.replicaId, startupMs: Math.round(performance.now() - started) },
      `Leoflow ${config.edition} ready on http://${addr.address}:${addr.port}`,
    );

    let closing: Promise<void> | null = null;
    return {
      address: { host: addr.address, port: addr.port },
      databaseUrl,
      close() {
        closing ??= (async () => {
          logger.info('shutting down: no new work; waiting for running tasks');
          stopping = true;
          await loop.stop();
          await dispatcher.close();
          await Promise.all([...executors.values()].map((e) => e.shutdown(config.shutdownGraceMs)));
          await fleet.close();
          await reports.drain();
          await listener.close();
          await logs.close();
          // Release the lock only once our tasks are recorded, so a standby never sees them half-done.
          await leader.stop();
          await new Promise<void>((resolve) => {
            server.close(() => resolve());
            for (const s of sessions) s.close();
            setTimeout(() => {
              for (const s of sessions) s.destroy();
            }, 2000).unref();
          });
          await parser.close();
          await metricsServer?.close();
          await endPools(5);
          await embedded?.stop();
          logger.info('stopped');
        })();
        return closing;
      },
    };
  } catch (err) {
    for (const c of cleanups) await c().catch(() => {});
    await endPools(1);
    await embedded?.stop();
    throw err;
  }
}
