// Every setting with its flag, environment variable and kind: one table that the CLI's flags, the
// edition files and the loader all follow.

/** A configuration value as given, with where it came from, for error messages. */
export interface Raw {
  value: unknown;
  source: string;
}

type Kind = 'string' | 'duration' | 'positive-int' | 'port' | 'list' | 'boolean';

/** Every setting: its key in edition files, its flag, its environment variable, its kind. */
export const SETTINGS = {
  edition: { flag: '--edition', env: 'LEOFLOW_EDITION', kind: 'string' },
  replica_id: { flag: '--replica-id', env: 'LEOFLOW_REPLICA_ID', kind: 'string' },
  role: { flag: '--role', env: 'LEOFLOW_ROLE', kind: 'string' },
  leader_timeout: { flag: '--leader-timeout', env: 'LEOFLOW_LEADER_TIMEOUT', kind: 'duration' },
  loop_stall_threshold: { flag: '--loop-stall-threshold', env: 'LEOFLOW_LOOP_STALL_THRESHOLD', kind: 'duration' },
  listen: { flag: '--listen', env: 'LEOFLOW_LISTEN', kind: 'string' },
  advertise_url: { flag: '--advertise-url', env: 'LEOFLOW_ADVERTISE_URL', kind: 'string' },
  metrics_listen: { flag: '--metrics-listen', env: 'LEOFLOW_METRICS_LISTEN', kind: 'string' },
  database: { flag: '--database-url', env: 'DATABASE_URL', kind: 'string' },
  state_dir: { flag: '--state-dir', env: 'LEOFLOW_STATE_DIR', kind: 'string' },
  embedded_pg_port: { flag: '--embedded-pg-port', env: 'LEOFLOW_EMBEDDED_PG_PORT', kind: 'port' },
  executor: { flag: '--executor', env: 'LEOFLOW_EXECUTOR', kind: 'string' },
  dags: { flag: '--dags', env: 'LEOFLOW_DAGS', kind: 'list' },
  tick_interval: { flag: '--tick-interval', env: 'LEOFLOW_TICK_INTERVAL', kind: 'duration' },
  dispatch_workers: { flag: '--dispatch-workers', env: 'LEOFLOW_DISPATCH_WORKERS', kind: 'positive-int' },
  dispatch_queue: { flag: '--dispatch-queue', env: 'LEOFLOW_DISPATCH_QUEUE', kind: 'positive-int' },
  run_orphan_threshold: { flag: '--run-orphan-threshold', env: 'LEOFLOW_RUN_ORPHAN_THRESHOLD', kind: 'duration' },
  heartbeat_threshold: { flag: '--heartbeat-threshold', env: 'LEOFLOW_HEARTBEAT_THRESHOLD', kind: 'duration' },
  heartbeat_interval: { flag: '--heartbeat-interval', env: 'LEOFLOW_HEARTBEAT_INTERVAL', kind: 'duration' },
  kill_grace: { flag: '--kill-grace', env: 'LEOFLOW_KILL_GRACE', kind: 'duration' },
  max_output_size: { flag: '--max-output-size', env: 'LEOFLOW_MAX_OUTPUT_SIZE', kind: 'string' },
  shutdown_grace: { flag: '--shutdown-grace', env: 'LEOFLOW_SHUTDOWN_GRACE', kind: 'duration' },
  leader_watchdog: { flag: '--leader-watchdog', env: 'LEOFLOW_LEADER_WATCHDOG', kind: 'duration' },
  retention: { flag: '--retention', env: 'LEOFLOW_RETENTION', kind: 'duration' },
  watch_buffer: { flag: '--watch-buffer', env: 'LEOFLOW_WATCH_BUFFER', kind: 'positive-int' },
  max_host_connections: { flag: '--max-host-connections', env: 'LEOFLOW_MAX_HOST_CONNECTIONS', kind: 'positive-int' },
  idle_connection_timeout: {
    flag: '--idle-connection-timeout',
    env: 'LEOFLOW_IDLE_CONNECTION_TIMEOUT',
    kind: 'duration',
  },
  max_token_agents: { flag: '--max-token-agents', env: 'LEOFLOW_MAX_TOKEN_AGENTS', kind: 'positive-int' },
  max_token_writes: { flag: '--max-token-writes', env: 'LEOFLOW_MAX_TOKEN_WRITES', kind: 'positive-int' },
  max_token_streams: { flag: '--max-token-streams', env: 'LEOFLOW_MAX_TOKEN_STREAMS', kind: 'positive-int' },
  max_token_concurrent_writes: {
    flag: '--max-token-concurrent-writes',
    env: 'LEOFLOW_MAX_TOKEN_CONCURRENT_WRITES',
    kind: 'positive-int',
  },
  max_token_watches: { flag: '--max-token-watches', env: 'LEOFLOW_MAX_TOKEN_WATCHES', kind: 'positive-int' },
  max_token_follows: { flag: '--max-token-follows', env: 'LEOFLOW_MAX_TOKEN_FOLLOWS', kind: 'positive-int' },
  agent_retention: { flag: '--agent-retention', env: 'LEOFLOW_AGENT_RETENTION', kind: 'duration' },
  otlp_endpoint: { flag: '--otlp-endpoint', env: 'LEOFLOW_OTLP_ENDPOINT', kind: 'string' },
  agent_token: { flag: '--agent-token', env: 'LEOFLOW_AGENT_TOKEN', kind: 'string' },
  tls_cert: { flag: '--tls-cert', env: 'LEOFLOW_TLS_CERT', kind: 'string' },
  tls_key: { flag: '--tls-key', env: 'LEOFLOW_TLS_KEY', kind: 'string' },
  tls_client_ca: { flag: '--tls-client-ca', env: 'LEOFLOW_TLS_CLIENT_CA', kind: 'string' },
  tls_client_auth: { flag: '--tls-client-auth', env: 'LEOFLOW_TLS_CLIENT_AUTH', kind: 'string' },
  insecure: { flag: '--insecure', env: 'LEOFLOW_INSECURE', kind: 'boolean' },
  bootstrap_admin_token: { flag: '--bootstrap-admin-token', env: 'LEOFLOW_BOOTSTRAP_ADMIN_TOKEN', kind: 'string' },
  log_level: { flag: '--log-level', env: 'LEOFLOW_LOG_LEVEL', kind: 'string' },
  log_format: { flag: '--log-format', env: 'LEOFLOW_LOG_FORMAT', kind: 'string' },
  kubernetes_namespace: { flag: '--kubernetes-namespace', env: 'LEOFLOW_KUBERNETES_NAMESPACE', kind: 'string' },
  kubernetes_image: { flag: '--kubernetes-image', env: 'LEOFLOW_KUBERNETES_IMAGE', kind: 'string' },
  kubeconfig: { flag: '--kubeconfig', env: 'LEOFLOW_KUBECONFIG', kind: 'string' },
  pod_server_url: { flag: '--pod-server-url', env: 'LEOFLOW_POD_SERVER_URL', kind: 'string' },
  pod_agent_command: { flag: '--pod-agent-command', env: 'LEOFLOW_POD_AGENT_COMMAND', kind: 'list' },
  pod_pending_timeout: { flag: '--pod-pending-timeout', env: 'LEOFLOW_POD_PENDING_TIMEOUT', kind: 'duration' },
  pod_keep_succeeded: { flag: '--pod-keep-succeeded', env: 'LEOFLOW_POD_KEEP_SUCCEEDED', kind: 'duration' },
  pod_keep_failed: { flag: '--pod-keep-failed', env: 'LEOFLOW_POD_KEEP_FAILED', kind: 'duration' },
  pod_agent_token_secret: { flag: '--pod-agent-token-secret', env: 'LEOFLOW_POD_AGENT_TOKEN_SECRET', kind: 'string' },
  pod_ca: { flag: '--pod-ca', env: 'LEOFLOW_POD_CA', kind: 'string' },
  pod_template: { flag: '--pod-template', env: 'LEOFLOW_POD_TEMPLATE', kind: 'string' },
  control_plane_namespace: {
    flag: '--control-plane-namespace',
    env: 'LEOFLOW_CONTROL_PLANE_NAMESPACE',
    kind: 'string',
  },
  max_free_retries: { flag: '--max-free-retries', env: 'LEOFLOW_MAX_FREE_RETRIES', kind: 'string' },
  hooks: { flag: '--hooks', env: 'LEOFLOW_HOOKS', kind: 'string' },
  notify: { flag: '--notify', env: 'LEOFLOW_NOTIFY', kind: 'string' },
} as const satisfies Record<string, { flag: string; env: string; kind: Kind }>;

export type SettingKey = keyof typeof SETTINGS;

/** How a part of the configuration (TLS, the kubernetes executor) reads its settings and reports
 *  problems into the one list `loadConfig` throws with. */
export interface SettingReader {
  /** The value as given by flag, environment or edition file; undefined when none sets it. */
  pick(key: SettingKey): Raw | undefined;
  /** The value compiled; on a problem, it is recorded (with the source) and the fallback returned. */
  get<T>(key: SettingKey, compile: (v: unknown) => T, fallback: T): T;
  problems: string[];
  /** Relative paths are resolved against it. */
  cwd: string;
}
