import { createEventFeed } from '../feed/event-feed.js';
import type { SpanRecorder } from '../tracing/span-recorder.js';
import { createChangeSignal } from './api/change-signal.js';
import path from 'node:path';
import type { Logger } from 'pino';
import { currentLeaderId } from '../db/leader.js';
import { ping } from '../db/ping.js';
import { latestMigration, pendingMigrations } from '../db/migrate.js';
import { installIdentity } from '../db/install-identity.js';
import { listen } from '../db/notifications.js';
import { advertiseReplica } from '../db/replica-addresses.js';
import { replicaSessionName } from '../db/replicas.js';
import type { Executor } from '../executors/executor.js';
import { createSubprocessExecutor } from '../executors/subprocess/subprocess-executor.js';
import { LEADER_LOCK_KEY } from '../scheduler/leader.js';
import type { Scheduler } from '../scheduler/scheduler.js';
import { advertisedUrl } from './advertised-url.js';
import { wireReporting } from './reporting-wiring.js';
import { wireDispatcher } from './dispatcher-wiring.js';
import { logReady } from './ready-line.js';
import { wireScheduler } from './scheduler-wiring.js';
import { createAgentFleet } from './agents/fleet.js';
import { createCacheGate } from './cache-gate-wiring.js';
import { apiRoutes } from './api-routes.js';
import { prepareAuth } from './auth/prepare-auth.js';
import { serveApi } from './api-server.js';
import { startKubernetesExecutor } from './kubernetes-executor-wiring.js';
import { startTlsReloader } from './auth/tls-reloader.js';
import { applyParsedDags, parseDagPaths } from './dags/apply-dag-paths.js';
import type { Config } from './config/config.js';
import { createDagParser } from './dags/dag-parser.js';
import { openStorage, type Storage } from './open-storage.js';
import { createHealth } from './observability/health.js';
import { stopReplica } from './stop-replica.js';
import { NotificationDeliverer } from './notify/deliverer.js';
import { writeNotifyDefaults } from '../db/notify-out/write-notify-defaults.js';
import { replicaNotifications } from './replica-notifications.js';
import { createMetrics } from './observability/metrics.js';
import { serveMetrics } from './observability/serve-metrics.js';

export interface ControlPlane {
  /** The address the API listens on (the port is the real one when 0 was asked). */
  readonly address: { host: string; port: number };
  readonly databaseUrl: string;
  /**
   * Graceful stop, in an order that loses nothing: no more work placed here or on this replica's
   * agents; leadership released; agents sent to another replica; running subprocess tasks finish
   * (up to shutdown_grace); the listeners (LISTEN and the API) close last.
   */
  close(): Promise<void>;
  /** Reads the TLS files again (SIGHUP); false when there is no TLS or nothing changed. */
  reloadTls(): boolean;
  /**
   * Settles when the replica cannot go on: its embedded Postgres died and could not be kept
   * running. The caller stops it and exits non-zero with the reason.
   */
  readonly lost: Promise<Error>;
}

/**
 * Wires one control-plane replica: the database, the executors behind the dispatcher, the
 * scheduler behind the leader lock, and the API. Every replica serves the API; only the leader
 * steps. Wiring only: each part is built in its own module. `storage` is opened here unless the
 * caller has started opening it already (the CLI does, while this module loads).
 */
export async function startControlPlane(
  config: Config,
  logger: Logger,
  storage: Promise<Storage> = openStorage(config, logger),
): Promise<ControlPlane> {
  const started = performance.now();
  // The DAG files are parsed while the database opens and the replica is wired: the parser's
  // worker thread takes about as long to boot as a warm Postgres takes to start.
  const parser = createDagParser({
    maxThreads: 1,
    timeoutMs: 10_000,
    defaultExecutor: config.executor,
    controlPlaneNamespace: config.kubernetes?.controlPlaneNamespace,
  });
  const parsedDags = parseDagPaths(config.dags, (source, file) => parser.parse(source, file));
  parsedDags.catch(() => {}); // a bad file fails the start where the files are applied
  let opened: Storage;
  try {
    opened = await storage;
  } catch (err) {
    await parser.close();
    throw err;
  }
  const { lock, db } = opened;
  const { sql } = db;
  // Aborted when a stop runs out of time: the reports and log lines retried through a database
  // outage are then left to the next start (the attempts' folders keep them).
  const stopRetrying = new AbortController();
  const cleanups: (() => Promise<unknown>)[] = [];
  // What the start hands on once wired: the replica, its wait for leadership, its ready log line.
  let ready: { plane: ControlPlane; leadership: Scheduler['leadership']; announce(): void };
  try {
    const metrics = createMetrics({ role: config.role });
    // Off unless --otlp-endpoint is set: then spans of runs and attempts (from the events log, by
    // the leader), of dispatch and of pod creation go to the collector.
    const tracing = config.otlpEndpoint
      ? (await import('../tracing/replica-tracing.js')).startReplicaTracing({
          endpoint: config.otlpEndpoint,
          replicaId: config.replicaId,
          edition: config.edition,
          logger,
        })
      : null;
    if (tracing) cleanups.push(() => tracing.close());
    const auth = await prepareAuth(config, sql, logger, () =>
      metrics.apiLimited.inc({ limit: 'agents', rpc: 'Connect' }),
    );
    // The scheduler is built once the dispatcher exists; what reports to it before goes through here.
    let scheduler: Scheduler | null = null;
    // The leader's recorder of run and attempt spans; made with the event feed it reads.
    let spans: SpanRecorder | null = null;
    const { logs, reports, reporter } = wireReporting(db, logger, metrics, stopRetrying.signal, (runId) =>
      scheduler?.nudge([runId], 'finished'),
    );
    // Read once: it names the install in pods and in every attempt's idempotency key.
    const install = await installIdentity(sql);
    // Attempts of cached tasks pass it before any executor: a hit runs nothing.
    const cacheGate = createCacheGate(sql, logger, (runId) => scheduler?.nudge([runId], 'finished'));
    const fleet = createAgentFleet({
      sql,
      cacheGate,
      install,
      claimSql: db.claimSql,
      logs,
      reports,
      logger,
      metrics,
      replicaId: config.replicaId,
      keepaliveMs: config.heartbeatIntervalMs,
      killGraceMs: config.killGraceMs,
      maxOutputBytes: config.maxOutputBytes,
      heartbeatThresholdMs: config.heartbeatThresholdMs,
      agentCredentials: auth.agentCredentials,
      nudge: (runIds, cause) => scheduler?.nudge(runIds, cause),
      nudgeQueued: (atLeast) => scheduler?.nudgeQueued(atLeast),
    });
    const subprocess: Executor = createSubprocessExecutor({
      reporter,
      logger: logger.child({ executor: 'subprocess' }),
      attemptsDir: path.join(config.stateDir, 'attempts'),
      killGraceMs: config.killGraceMs,
      heartbeatIntervalMs: config.heartbeatIntervalMs,
      maxOutputBytes: config.maxOutputBytes,
      onStart: (how) => metrics.taskStarts.inc({ how: how.replace('-', '_') }),
    });
    // Only a replica that may lead creates and follows pods: a worker or an observer never
    // dispatches, so it needs no kubeconfig and holds no client.
    const mayLead = config.role === 'auto' || config.role === 'leader';
    const kubernetes =
      config.kubernetes && mayLead
        ? await startKubernetesExecutor(config, {
            install,
            sql,
            reporter,
            logger,
            metrics,
            tracing,
            nudge: (runIds) => scheduler?.nudge(runIds, 'finished'),
          })
        : null;
    // A pod's agent streams to some replica: a cancel reaches both the pod (deleted, with its
    // grace) and, on that replica, its agent.
    const executors = new Map<string, Executor>([
      ['subprocess', cacheGate.wrap(subprocess)],
      ...(kubernetes ? [['kubernetes', cacheGate.wrap(kubernetes)] as const] : []),
      ['agents', cacheGate.wrap(fleet.executor)],
    ]);
    metrics.sources.agentsConnected = () => fleet.registry.size;
    const { dispatcher, queueDepth } = wireDispatcher({
      config,
      install,
      sql,
      executors,
      agentPlacement: fleet.placement,
      metrics,
      tracing,
      logger,
    });
    const sched = wireScheduler({
      config,
      db,
      logger,
      dispatcher,
      reports,
      metrics,
      leading: (yes) => {
        // The leader follows the pods: it adopts them on taking the lead.
        void kubernetes
          ?.lead(yes)
          .catch((err: unknown) =>
            logger.error({ err }, 'kubernetes executor: could not adopt the pods on taking the lead'),
          );
        spans?.lead(yes);
      },
    });
    scheduler = sched;
    let closing: Promise<void> | null = null;

    cleanups.push(() => parser.close());
    let api: { listening(): boolean } | null = null;
    const health = createHealth({
      loopProgress: () => sched.loopProgress(),
      loopStallMs: config.loopStallMs,
      pingDatabase: () => ping(db.healthSql),
      pendingMigrations: () => pendingMigrations(db.healthSql),
      latestMigration: () => latestMigration(db.healthSql),
      apiListening: () => api?.listening() ?? false,
      stopping: () => closing !== null,
      databaseTimeoutMs: 2_000,
    });
    // One feed of events and one change signal for every watcher and log follower of this replica.
    const events = createEventFeed(sql, logger);
    cleanups.push(async () => events.close());
    const changes = createChangeSignal();
    spans = tracing && tracing.recorder(sql, events);
    metrics.sources.watchersConnected = () => events.watchers();
    const routes = apiRoutes({
      sql,
      logger,
      config,
      auth,
      metrics,
      parser,
      scheduler: sched,
      fleet,
      health,
      events,
      changes,
      dispatchQueueDepth: queueDepth,
    });
    const tls = config.tls && {
      cert: config.tls.cert,
      key: config.tls.key,
      clientCa: config.tls.clientCa,
      rejectUnauthorized: config.tls.clientAuth === 'all',
    };
    const apiServer = await serveApi(routes, config.listenHost, config.listenPort, tls, {
      maxPerHost: config.maxHostConnections,
      idleMs: config.idleConnectionTimeoutMs,
      closed: (reason) => metrics.apiConnectionsClosed.inc({ reason }),
    });
    api = apiServer;
    cleanups.push(() => apiServer.close());
    lock.setUrl(`${config.tls ? 'https' : 'http'}://${apiServer.address.host}:${apiServer.address.port}`);
    const tlsReloader = config.tls ? startTlsReloader(config.tls, (t) => apiServer.setTls(t), logger) : null;
    if (tlsReloader) cleanups.push(async () => tlsReloader.stop());
    const metricsServer = config.metricsListen
      ? await serveMetrics(metrics, config.metricsListen.host, config.metricsListen.port, health)
      : null;
    if (metricsServer) cleanups.push(() => metricsServer.close());

    for (const a of await applyParsedDags(await parsedDags, sql))
      logger.info({ dagId: a.dagId, file: a.file, outcome: a.outcome }, 'applied DAG file');

    const listener = listen(
      db.url,
      logger,
      replicaNotifications({
        logger,
        scheduler: sched,
        fleet,
        events,
        changes,
        tokenStreams: auth.streams,
        authenticator: auth.authenticator,
      }),
      replicaSessionName(config.role, config.replicaId),
    );
    cleanups.push(() => listener.close());
    // An observer writes nothing: notifications are delivered by the replicas that may write.
    let deliverer: NotificationDeliverer | null = null;
    if (config.role !== 'observer') {
      await writeNotifyDefaults(sql, config.notify.defaults);
      const d = new NotificationDeliverer({
        sql,
        logger,
        settings: config.notify,
        delivered: (outcome) => metrics.notifications.inc({ outcome }),
      });
      d.start();
      cleanups.push(() => d.stop());
      deliverer = d;
    }
    // Agents are told this address, at Welcome and when another replica stops (an observer takes
    // no agent streams).
    if (config.role !== 'observer') {
      const agentUrl = advertisedUrl({
        configured: config.advertiseUrl,
        host: apiServer.address.host,
        port: apiServer.address.port,
        tls: config.tls !== null,
      });
      await advertiseReplica(sql, config.replicaId, agentUrl);
      logger.info({ agentUrl }, 'agents are told to reach this replica at this address (--advertise-url)');
    }

    // The tasks an earlier process of this replica left running are supervised again (and those
    // that ended meanwhile recorded) before this one schedules anything.
    for (const executor of executors.values()) await executor.adopt?.();
    sched.start();

    const plane: ControlPlane = {
      address: apiServer.address,
      databaseUrl: db.url,
      reloadTls: () => tlsReloader?.reload('SIGHUP') ?? false,
      lost: db.lost,
      close() {
        closing ??= stopReplica(
          {
            db,
            lock,
            scheduler: sched,
            fleet,
            dispatcher,
            executors,
            reports,
            logs,
            listener,
            notifications: deliverer,
            spans,
            events,
            api: apiServer,
            parser,
            metricsServer,
            tracing,
          },
          config,
          logger,
          stopRetrying,
        );
        return closing;
      },
    };
    const announce = () =>
      logReady(logger, config, apiServer.address, metricsServer?.address ?? null, performance.now() - started);
    ready = { plane, leadership: (timeoutMs: number) => sched.leadership(timeoutMs), announce };
  } catch (err) {
    for (const c of cleanups) await c().catch(() => {});
    // A failed start leaves an embedded Postgres it adopted as it found it.
    await db.close(1, 'start-failed');
    lock.release();
    throw err;
  }
  // A replica that must lead and cannot stops whole: its API served reads meanwhile.
  const { plane, leadership, announce } = ready;
  if (config.role === 'leader' && !(await leadership(config.leaderTimeoutMs))) {
    const holder = await currentLeaderId(db.sql, LEADER_LOCK_KEY).catch(() => null);
    await plane.close();
    const who = holder ? `replica "${holder}" leads` : 'no replica leads: is the database reachable?';
    throw new Error(
      `role leader: could not become leader within ${config.leaderTimeoutMs / 1000}s (${who}); ` +
        'use --role auto to stand by, or raise --leader-timeout',
    );
  }
  announce();
  return plane;
}
