// The compiled configuration's shape and the closed sets its strings come from; what every part of
// a replica reads, kept apart from how it is loaded so readers import no parsing.
import type { KubernetesConfig } from './read-kubernetes-config.js';
import type { TlsConfig } from './read-tls-config.js';
import type { Hook } from './read-hooks.js';
import type { NotifySettings } from './read-notify-file.js';

export const EDITIONS = ['lite', 'pro'] as const;
export type Edition = (typeof EDITIONS)[number];
export const EXECUTORS = ['subprocess', 'kubernetes'] as const;
/**
 * What a replica does besides serving reads: `auto` campaigns and leads if elected; `leader` must
 * lead (it fails at start when it cannot within leader_timeout); `worker` serves the API and agent
 * streams but never campaigns; `observer` serves reads only.
 */
export const ROLES = ['auto', 'leader', 'worker', 'observer'] as const;
export type ReplicaRole = (typeof ROLES)[number];
/**
 * A replica id names its Postgres sessions (`application_name`, 63 bytes at most, where the
 * longest prefix, `leoflow-replica:observer:`, takes 25): longer ids would be cut and misread.
 */
export const MAX_REPLICA_ID = 38;

/** The compiled, validated configuration of a control-plane replica. Durations in ms. */
export interface Config {
  edition: Edition;
  replicaId: string;
  role: ReplicaRole;
  /** How long a replica of role `leader` waits for the lock at start before giving up. */
  leaderTimeoutMs: number;
  /** /healthz fails when the scheduler loop has made no progress (a turn, a step ended) this long
   *  (default: 60 s, or five ticks when that is longer). */
  loopStallMs: number;
  listenHost: string;
  listenPort: number;
  /** The API's URL as agents reach this replica; null: derived from the address it listens on. */
  advertiseUrl: string | null;
  /** null when metrics are off. */
  metricsListen: { host: string; port: number } | null;
  /** null: start the embedded Postgres (Lite only). */
  databaseUrl: string | null;
  stateDir: string;
  embeddedPgPort: number;
  executor: string;
  /** DAG files or folders applied at start-up. */
  dags: string[];
  tickMs: number;
  dispatchWorkers: number;
  dispatchQueue: number;
  runOrphanThresholdMs: number;
  heartbeatThresholdMs: number;
  heartbeatIntervalMs: number;
  killGraceMs: number;
  /** The size limit of a task's output (LEOFLOW_OUTPUT), in bytes: default 64 KiB, at most 1 MiB. */
  maxOutputBytes: number;
  shutdownGraceMs: number;
  leaderWatchdogMs: number;
  /** Finished runs, with their task instances, events and logs, are removed this long after they
   *  ended; null: kept for ever. */
  retentionMs: number | null;
  /** How many events a WatchRun/WatchRuns stream may fall behind before it is cut off. */
  watchBufferEvents: number;
  /** With auth on: the open streams one API token may hold (RESOURCE_EXHAUSTED past it). */
  maxTokenStreams: number;
  /** The watch streams (WatchRun, WatchRuns, WatchCleanHistory) one API token may hold open. */
  maxTokenWatches: number;
  /** The log follows (TailLogs with follow) one API token may hold open. */
  maxTokenFollows: number;
  /** The writes a second one API token (with auth off, one host) may make (RESOURCE_EXHAUSTED past it). */
  maxTokenWrites: number;
  /** The writes of one API token (with auth off, one host) that run at once; more wait in line. */
  maxTokenConcurrentWrites: number;
  /** The agent rows one API token of role agent may hold (RESOURCE_EXHAUSTED for one more). */
  maxTokenAgents: number;
  /** The API connections one host may hold open; more are closed as they come. */
  maxHostConnections: number;
  /** An API connection with no call in flight this long is closed. */
  idleConnectionTimeoutMs: number;
  /** An agent with no stream and no attempt is forgotten (its row deleted) this long after it was
   *  last seen; null: remembered for ever. */
  agentRetentionMs: number | null;
  /** Where spans go, by OTLP over HTTP (protobuf): the traces URL; null: tracing is off. */
  otlpEndpoint: string | null;
  /** Deprecated: a secret any agent may send in Hello, for any agent id; null when none is set. */
  agentToken: string | null;
  /** TLS on the API port; null: plain HTTP/2 (h2c) and HTTP/1.1. */
  tls: TlsConfig | null;
  /**
   * True when every API call needs a token and every agent a credential: always in Pro, and in
   * Lite off loopback, unless `--insecure` says otherwise.
   */
  authRequired: boolean;
  /** `--insecure` given: auth is off where it would be on, and every start says so in its log. */
  insecure: boolean;
  /** An admin token's secret chosen by the operator (from a Secret), stored at start; null: none. */
  bootstrapAdminToken: string | null;
  logLevel: string;
  logFormat: 'json' | 'pretty';
  /** The kubernetes executor's settings; null when it is not this replica's executor. */
  kubernetes: KubernetesConfig | null;
  /** The webhooks served at `POST /hooks/<name>` (--hooks FILE); none by default. */
  hooks: Hook[];
  /** Where notifications go, and the rules for DAGs that name none (--notify FILE); none by default. */
  notify: NotifySettings;
}
