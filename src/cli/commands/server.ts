import type { Command } from 'commander';
import { ConfigError } from '../../server/config/config-error.js';
import { loadConfig } from '../../server/config/load-config.js';
import { SETTINGS, type SettingKey } from '../../server/config/settings.js';

const HELP: Record<SettingKey, string> = {
  edition: 'lite | pro (edition defaults from editions/<edition>/config.json)',
  replica_id: 'name of this replica, at most 38 of [A-Za-z0-9._-] (default: host-pid-random)',
  role:
    'auto (campaign, lead if elected) | leader (must lead: fail at start otherwise) | worker (serve, ' +
    'never campaign) | observer (read-only API)',
  leader_timeout: 'with --role leader: how long to wait for leadership at start before failing, e.g. 30s',
  loop_stall_threshold:
    '/healthz fails when the scheduler loop made no progress this long (default 60s, or 5 ticks if longer)',
  listen: 'HOST:PORT for the API (gRPC, gRPC-Web and Connect)',
  advertise_url:
    "the API's URL as agents reach this replica, " +
    'told to agents so they find it when another replica stops (default: from --listen)',
  metrics_listen: 'HOST:PORT for Prometheus metrics at /metrics (HTTP/1.1), or off',
  database: 'postgres:// URL; without it, Lite starts an embedded Postgres',
  state_dir: 'folder for the embedded Postgres data and other state',
  embedded_pg_port: 'port of the embedded Postgres (127.0.0.1 only)',
  executor: 'executor for tasks that do not name one: subprocess | kubernetes',
  dags: 'DAG files or folders to apply at start (comma-separated)',
  tick_interval: 'scheduler safety-net tick, e.g. 1s',
  dispatch_workers: 'number of dispatch drainers',
  dispatch_queue: 'dispatch queue capacity',
  run_orphan_threshold: 'run reaper threshold, e.g. 5m',
  heartbeat_threshold: 'task heartbeat staleness threshold, e.g. 90s',
  heartbeat_interval: 'how often live tasks heartbeat, e.g. 5s',
  kill_grace: 'time between SIGTERM and SIGKILL when stopping a task',
  max_output_size: "the size limit of a task's output (LEOFLOW_OUTPUT), e.g. 256KiB; default 64KiB, at most 1MiB",
  shutdown_grace: 'how long a graceful stop waits for running tasks',
  leader_watchdog: 'how often the leader checks its lock session',
  retention: 'remove finished runs (tasks, events, logs) this long after they ended, e.g. 30d; off keeps them',
  watch_buffer:
    'events a WatchRun/WatchRuns stream may fall behind before it is cut off (RESOURCE_EXHAUSTED), default 10000',
  max_host_connections:
    'the API connections one host (address) may hold open; more are closed as they come, ' +
    'default 256 (raise it for many agents behind one NAT address)',
  idle_connection_timeout:
    'an API connection with no call in flight this long is closed (HTTP/2: GOAWAY; clients reconnect), default 60s',
  max_token_agents:
    'the agents (agent ids with a row) one API token of role agent may hold; a Hello for one more is refused, ' +
    'default 1000',
  max_token_writes:
    'the writes (trigger, cancel, clear, pause, apply, delete, drain, token changes) one API token, ' +
    'or with auth off one host, may make a second (ten seconds of them at once), default 20',
  max_token_streams: 'with auth on: the agent streams one API token may hold open, default 256',
  max_token_concurrent_writes:
    'the writes of one API token (with auth off, one host) that run at once; 64 more wait in line, ' +
    'the rest are refused; default 4',
  max_token_watches:
    'with auth on: the watch streams (WatchRun, WatchRuns, WatchCleanHistory) one API token may hold open, default 64',
  max_token_follows: 'with auth on: the log follows (TailLogs) one API token may hold open, default 64',
  agent_retention:
    'forget an agent (no stream, no attempt) this long after it was last seen, e.g. 7d; off remembers them',
  otlp_endpoint:
    'export spans of runs, attempts, ' +
    'dispatch and pod creation by OTLP/HTTP to this collector (e.g. http://127.0.0.1:4318); off by default',
  agent_token:
    'deprecated: one secret any agent may present in Hello, for any id (use `leoflow token create --role agent`)',
  insecure:
    'run without API tokens and agent credentials where they are required (Pro; Lite off loopback); ' +
    'logged at every start',
  bootstrap_admin_token:
    'an admin token of your choosing (>= 32 random characters), stored hashed at start under id "bootstrap-admin"',
  tls_cert: 'PEM certificate (chain) of the API port: serve gRPC, gRPC-Web and Connect over TLS (with --tls-key)',
  tls_key: 'PEM private key of --tls-cert (unencrypted)',
  tls_client_ca:
    "mTLS: PEM CA of agents' client certificates; an agent stream must then present one whose CN is its agent id",
  tls_client_auth:
    'with --tls-client-ca: agents (default: only agent streams need a client certificate) | all (every client, ' +
    'the CLI too)',
  log_level: 'trace | debug | info | warn | error | fatal | silent',
  log_format: 'json | pretty (default: pretty at a terminal, json otherwise)',
  kubernetes_namespace: 'kubernetes executor: namespace of the pods of tasks that name none',
  kubernetes_image: 'kubernetes executor: the image pods run (the Leoflow image), unless a task names its own',
  kubeconfig:
    'kubernetes executor: auto ($KUBECONFIG, ~/.kube/config, else in-cluster) | in-cluster | a kubeconfig file',
  pod_server_url: 'kubernetes executor: the API as pods reach it, e.g. http://leoflow:7070 (the Service)',
  pod_agent_command: "kubernetes executor: the pod's leoflow program (comma-separated argv, default leoflow)",
  pod_pending_timeout: 'kubernetes executor: fail an attempt whose pod stays unschedulable this long, e.g. 5m',
  pod_keep_succeeded: 'kubernetes executor: keep a succeeded pod this long before deleting it (0: at once)',
  pod_keep_failed: 'kubernetes executor: keep a failed pod this long before deleting it, e.g. 1h',
  control_plane_namespace:
    "kubernetes executor: the control plane's own namespace (the manifests set it); tasks may not run there",
  max_free_retries:
    'kubernetes executor: losses of a task that spend no try (lost node, eviction), default 3; ' +
    'past them a loss spends one',
  pod_agent_token_secret:
    "kubernetes executor: SECRET[/KEY] (key default agent-token) in the pods' namespace holding --agent-token, " +
    'so pod specs never carry it',
  pod_template:
    'kubernetes executor: a YAML file of what every task pod gets besides its own (labels, annotations, ' +
    'affinity, priorityClassName, imagePullSecrets, volumes, securityContext)',
  hooks:
    'a YAML file of webhooks: POST /hooks/NAME turns a JSON body into an event, ' +
    'signed with HMAC-SHA256 or sent with a token',
  notify:
    'a YAML file of notification receivers (webhook URLs by secret reference) and default rules: ' +
    'who hears of runs that fail, succeed or miss their deadline',
  pod_ca:
    "kubernetes executor: secret:NAME[/KEY] or configmap:NAME[/KEY] (key default ca.crt) in the pods' namespace: " +
    "the CA pods' agents verify an https:// --pod-server-url with",
};

/** What a stop may take past its shutdown and kill graces before the process exits anyway. */
const STOP_SLACK_MS = 10_000;

/** commander's option name → our setting key (`--tick-interval` → tickInterval → tick_interval). */
function camel(flag: string): string {
  return flag.replace(/^--/, '').replace(/-([a-z])/g, (_, c: string) => c.toUpperCase());
}

export function registerServer(program: Command): void {
  const cmd = program.command('server').description('run a control-plane replica (API, scheduler, executor)');
  for (const [key, s] of Object.entries(SETTINGS)) {
    cmd.option(s.kind === 'boolean' ? s.flag : `${s.flag} <value>`, `${HELP[key as SettingKey]} [env ${s.env}]`);
  }
  cmd.action(async (opts: Record<string, string>) => {
    const flags: Partial<Record<SettingKey, string>> = {};
    for (const [key, s] of Object.entries(SETTINGS)) {
      const v = opts[camel(s.flag)] as string | boolean | undefined;
      if (v !== undefined) flags[key as SettingKey] = String(v);
    }
    let config;
    try {
      config = loadConfig(flags);
    } catch (err) {
      if (err instanceof ConfigError) {
        process.stderr.write(`leoflow server: ${err.message}\n`);
        process.exit(2);
      }
      throw err;
    }
    // Loaded here, not at the top: the client commands should not pay for the server's modules.
    const { createLogger } = await import('../../core/logger.js');
    const logger = createLogger({ level: config.logLevel, format: config.logFormat, replicaId: config.replicaId });
    // The database starts (Lite's embedded Postgres, the migrations) while the control plane's
    // many modules load: a warm start waits for the slower of the two, not for both in turn.
    const { openStorage } = await import('../../server/open-storage.js');
    const storage = openStorage(config, logger);
    storage.catch(() => {}); // its failure is the start's, reported below; not an unhandled one meanwhile
    let plane;
    try {
      const { startControlPlane } = await import('../../server/control-plane.js').catch(async (err: unknown) => {
        const opened = await storage.catch(() => null);
        await opened?.db.close(1, 'start-failed');
        opened?.lock.release();
        throw err;
      });
      plane = await startControlPlane(config, logger, storage);
    } catch (err) {
      // One plain line whatever the log format: a person reads it, at a terminal or in CI's
      // output; the stack is there for who asks for debug logs.
      logger.debug({ err }, 'could not start');
      const busy = (err as Error).name === 'StateDirBusyError';
      process.stderr.write(`leoflow server: ${busy ? '' : 'could not start: '}${(err as Error).message}\n`);
      process.exitCode = 1;
      return;
    }
    let signals = 0;
    const stop = (signal: string, exitCode: number) => {
      signals++;
      if (signals > 1) {
        logger.warn({ signal }, 'second signal: exiting now');
        process.exit(130);
      }
      logger.info({ signal }, signal === 'lost' ? 'stopping: the database is gone' : 'received signal');
      // Every wait of the stop ends by the shutdown grace; this is the net under them (a task
      // stopped at the deadline gets its kill grace, its end a moment to be written).
      setTimeout(
        () => {
          logger.error({ shutdownGraceMs: config.shutdownGraceMs }, 'could not stop in time: exiting now');
          process.exit(1);
        },
        config.shutdownGraceMs + config.killGraceMs + STOP_SLACK_MS,
      ).unref();
      plane.close().then(
        () => process.exit(exitCode),
        (err: unknown) => {
          logger.error({ err }, 'error while shutting down');
          process.exit(1);
        },
      );
    };
    // The embedded Postgres died and could not be kept running: stop, and exit non-zero so a
    // supervisor sees it, rather than retry a database that will not come back.
    void plane.lost.then((err) => {
      logger.fatal({ err: err.message }, 'the database is gone: stopping');
      process.stderr.write(`leoflow server: stopping: ${err.message}\n`);
      stop('lost', 1);
    });
    // A rotated certificate is put in use without a restart (the files are also checked each minute).
    process.on('SIGHUP', () => void plane.reloadTls());
    process.on('SIGTERM', () => stop('SIGTERM', 0));
    process.on('SIGINT', () => stop('SIGINT', 0));
  });
}
