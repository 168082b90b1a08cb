import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseDuration } from '../core/duration.js';
import { dns1123LabelProblem, dns1123SubdomainProblem } from '../core/kubernetes-names.js';
import type { KubeconfigSource } from '../executors/kubernetes/load-kube-config.js';
import { readCertificateAndKey, readCertificateFile } from './pem-files.js';

/** Edition files sit at the package root; `dist/server` and `src/server` are at the same depth. */
const EDITIONS_DIR = new URL('../../editions/', import.meta.url);

export const EDITIONS = ['lite', 'pro'] as const;
export type Edition = (typeof EDITIONS)[number];
export const EXECUTORS = ['subprocess', 'kubernetes'] as const;
export const LOG_FORMATS = ['json', 'pretty'] as const;
export const LOG_LEVELS = ['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent'] as const;
/**
 * What a replica does besides serving reads: `auto` campaigns and leads if elected; `leader` must
 * lead (it fails at start when it cannot within leader_timeout); `worker` serves the API and agent
 * streams but never campaigns; `observer` serves reads only.
 */
export const ROLES = ['auto', 'leader', 'worker', 'observer'] as const;
export type Role = (typeof ROLES)[number];
/**
 * A replica id names its Postgres sessions (`application_name`, 63 bytes at most, where the
 * longest prefix, `leoflow-replica:observer:`, takes 25): longer ids would be cut and misread.
 */
export const MAX_REPLICA_ID = 38;

/** The compiled, validated configuration of a control-plane replica. Durations in ms. */
export interface Config {
  edition: Edition;
  replicaId: string;
  role: Role;
  /** How long a replica of role `leader` waits for the lock at start before giving up. */
  leaderTimeoutMs: number;
  /** /healthz fails when the scheduler loop has made no progress (a turn, a step ended) this long
   *  (default: 60 s, or five ticks when that is longer). */
  loopStallMs: number;
  listenHost: string;
  listenPort: number;
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
  shutdownGraceMs: number;
  leaderWatchdogMs: number;
  /** Finished runs, with their task instances, events and logs, are removed this long after they
   *  ended; null: kept for ever. */
  retentionMs: number | null;
  /** How many events a WatchRun/WatchRuns stream may fall behind before it is cut off. */
  watchBufferEvents: number;
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
}

/** Who must present a client certificate signed by the client CA: agent streams only, or every call. */
export const TLS_CLIENT_AUTH = ['agents', 'all'] as const;

/** The API port's TLS: the files' contents, read and checked at start-up. */
export interface TlsConfig {
  /** The files, read again on SIGHUP and when they change (certificate rotation). */
  files: { cert: string; key: string; clientCa: string | null };
  cert: Buffer;
  key: Buffer;
  /** CA of agents' client certificates (mTLS); null: agents are not asked for one. */
  clientCa: Buffer | null;
  /** With clientCa: `agents` (an agent stream needs a certificate, other calls do not) or `all`
   *  (the handshake refuses any client without one). */
  clientAuth: (typeof TLS_CLIENT_AUTH)[number];
}

/** The kubernetes executor's settings. Durations in ms. */
export interface KubernetesConfig {
  /** Namespace of the pods of tasks that name none. */
  namespace: string;
  /** The image pods run (the Leoflow image) unless a task names its own. */
  image: string;
  kubeconfig: KubeconfigSource;
  /** The control plane's API as pods reach it (e.g. the Service's name), given to `leoflow agent --server`
   *  (several, comma-separated, tried in turn). */
  serverUrl: string;
  /** The pod's program for `agent --once …` (the `leoflow` command on the image's PATH). */
  agentCommand: string[];
  /** A pod unschedulable for this long fails its attempt. */
  podPendingTimeoutMs: number;
  /** How long a finished pod is kept before it is deleted: succeeded (0: at once), failed. */
  keepSucceededMs: number;
  keepFailedMs: number;
  /** The Secret (and key) in the pods' namespace holding the agent token, so pod specs never
   *  carry it; null: the token is written into the pod's env (readable by whoever reads pods). */
  agentTokenSecret: { name: string; key: string } | null;
  /** A Secret or ConfigMap (and key) in the pods' namespace holding the CA that pods' agents verify
   *  the control plane with (LEOFLOW_CA_FILE); null: none mounted. */
  podCa: PodCaSource | null;
}

export interface PodCaSource {
  kind: 'secret' | 'configmap';
  name: string;
  key: string;
}

/** A configuration value as given, with where it came from, for error messages. */
interface Raw {
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
  shutdown_grace: { flag: '--shutdown-grace', env: 'LEOFLOW_SHUTDOWN_GRACE', kind: 'duration' },
  leader_watchdog: { flag: '--leader-watchdog', env: 'LEOFLOW_LEADER_WATCHDOG', kind: 'duration' },
  retention: { flag: '--retention', env: 'LEOFLOW_RETENTION', kind: 'duration' },
  watch_buffer: { flag: '--watch-buffer', env: 'LEOFLOW_WATCH_BUFFER', kind: 'positive-int' },
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
} as const satisfies Record<string, { flag: string; env: string; kind: Kind }>;

export type SettingKey = keyof typeof SETTINGS;

/** True for an address only this machine can reach (where Lite may run without auth). */
export function isLoopback(host: string): boolean {
  return host === 'localhost' || host === '::1' || /^127\.\d+\.\d+\.\d+$/.test(host);
}

/** Thrown with every problem of a configuration, each naming the flag or variable it came from. */
export class ConfigError extends Error {
  override readonly name = 'ConfigError';
  constructor(readonly problems: string[]) {
    super(`invalid configuration:\n${problems.map((p) => `  - ${p}`).join('\n')}`);
  }
}

function editionDefaults(edition: Edition): Record<string, unknown> {
  return JSON.parse(readFileSync(new URL(`${edition}/config.json`, EDITIONS_DIR), 'utf8')) as Record<string, unknown>;
}

/**
 * Raw → defaulted → compiled and validated, once, at start-up. Precedence: flag, then
 * environment variable, then the edition file. Every problem is reported, not just the first.
 */
export function loadConfig(flags: Partial<Record<SettingKey, string | string[]>>, env: NodeJS.ProcessEnv = process.env, cwd = process.cwd()): Config {
  const problems: string[] = [];
  const pick = (key: SettingKey, defaults: Record<string, unknown> | null): Raw | undefined => {
    const s = SETTINGS[key];
    if (flags[key] !== undefined) return { value: flags[key], source: s.flag };
    if (env[s.env] !== undefined && env[s.env] !== '') return { value: env[s.env], source: `${s.env} (environment)` };
    if (defaults && defaults[key] !== undefined) return { value: defaults[key], source: `editions/${String(defaults.edition)}/config.json ${key}` };
    return undefined;
  };

  const editionRaw = pick('edition', null) ?? { value: 'lite', source: 'default' };
  let edition: Edition = 'lite';
  if ((EDITIONS as readonly unknown[]).includes(editionRaw.value)) edition = editionRaw.value as Edition;
  else problems.push(`${editionRaw.source}: must be one of ${EDITIONS.join(', ')}, got ${JSON.stringify(editionRaw.value)}`);
  const defaults = editionDefaults(edition);

  const get = <T>(key: SettingKey, compile: (v: unknown) => T, fallback: T): T => {
    const raw = pick(key, defaults);
    if (raw === undefined) return fallback;
    try {
      return compile(raw.value);
    } catch (err) {
      problems.push(`${raw.source}: ${(err as Error).message}`);
      return fallback;
    }
  };
  const duration = (v: unknown) => {
    const ms = parseDuration(v);
    if (ms <= 0) throw new Error(`must be a positive duration, got ${JSON.stringify(v)}`);
    // Node timers hold at most 2^31−1 ms; a longer one would fire at once.
    if (ms > 24 * 86_400_000) throw new Error(`must be at most 24d, got ${JSON.stringify(v)}`);
    return ms;
  };
  const positiveInt = (v: unknown) => {
    const n = typeof v === 'number' ? v : /^\s*\d+\s*$/.test(String(v)) ? Number(v) : NaN;
    if (!Number.isInteger(n) || n < 1) throw new Error(`must be a positive integer, got ${JSON.stringify(v)}`);
    return n;
  };
  const port = (v: unknown) => {
    const n = positiveInt(v);
    if (n > 65535) throw new Error(`must be a TCP port (1-65535), got ${JSON.stringify(v)}`);
    return n;
  };
  const oneOf = <T extends string>(allowed: readonly T[]) => (v: unknown): T => {
    if (!(allowed as readonly unknown[]).includes(v)) throw new Error(`must be one of ${allowed.join(', ')}, got ${JSON.stringify(v)}`);
    return v as T;
  };
  const nonEmpty = (v: unknown) => {
    if (typeof v !== 'string' || v.trim() === '') throw new Error(`must be a non-empty string, got ${JSON.stringify(v)}`);
    return v.trim();
  };
  // A plain number would be seconds to parseDuration, and "30" means 30 days to most readers of a
  // retention setting: only 0 may go without a unit.
  const retention = (example: string) => (v: unknown) => {
    if (v === 'off' || v === 0 || v === '0') return null;
    if (typeof v === 'number' || /^\s*\d+\s*$/.test(String(v))) throw new Error(`must be a duration with a unit, such as ${example}, or off (or 0), got ${JSON.stringify(v)}`);
    const ms = parseDuration(v);
    if (ms <= 0) throw new Error(`must be a positive duration such as ${example}, or off, got ${JSON.stringify(v)}`);
    return ms;
  };
  const list = (v: unknown) => (Array.isArray(v) ? v.map(String) : String(v).split(',')).map((s) => s.trim()).filter(Boolean);

  const hostPort = (example: string) => (v: unknown) => {
    const m = /^(\[[0-9a-fA-F:]+\]|[A-Za-z0-9.-]+):(\d+)$/.exec(String(v));
    if (!m) throw new Error(`must be HOST:PORT (e.g. ${example}), got ${JSON.stringify(v)}`);
    const p = Number(m[2]);
    if (p < 0 || p > 65535) throw new Error(`has an invalid port ${m[2]}`);
    return { host: m[1]!.replace(/^\[|\]$/g, ''), port: p };
  };
  const listen = get('listen', hostPort('127.0.0.1:7070'), { host: '127.0.0.1', port: 7070 });
  const metricsListen = get('metrics_listen', (v) => (v === 'off' ? null : hostPort('127.0.0.1:9464 or off')(v)), null);

  const database = get('database', (v) => {
    const s = nonEmpty(v);
    if (s === 'embedded' || s === 'required') return s;
    let u: URL;
    try {
      u = new URL(s);
    } catch {
      throw new Error(`must be a postgres:// URL, got ${JSON.stringify(s)}`);
    }
    if (u.protocol !== 'postgres:' && u.protocol !== 'postgresql:') throw new Error(`must be a postgres:// URL, got protocol ${JSON.stringify(u.protocol)}`);
    return s;
  }, 'embedded');
  let databaseUrl: string | null = null;
  if (database === 'required') problems.push(`the ${edition} edition needs a Postgres server: set DATABASE_URL or --database-url`);
  else if (database === 'embedded') {
    if (edition !== 'lite') problems.push(`the embedded Postgres is for the lite edition only: set DATABASE_URL or --database-url`);
  } else databaseUrl = database;

  const executor = get('executor', oneOf(EXECUTORS), 'subprocess');
  // Read only for the executor that uses them: a Lite replica is not asked for an image.
  let kubernetes: KubernetesConfig | null = null;
  if (executor === 'kubernetes') {
    const image = get('kubernetes_image', (v) => {
      const s = nonEmpty(v);
      if (/\s/.test(s)) throw new Error(`must be an image reference without spaces, got ${JSON.stringify(s)}`);
      return s;
    }, null as string | null);
    if (image === 'required' || (image === null && pick('kubernetes_image', defaults) === undefined)) problems.push('the kubernetes executor needs the image its pods run (the Leoflow image): set --kubernetes-image or LEOFLOW_KUBERNETES_IMAGE');
    const keep = (v: unknown) => {
      if (v === 0 || v === '0') return 0;
      const ms = parseDuration(v);
      if (ms > 24 * 86_400_000) throw new Error(`must be at most 24d, got ${JSON.stringify(v)}`);
      return ms;
    };
    kubernetes = {
      namespace: get('kubernetes_namespace', (v) => {
        const s = nonEmpty(v);
        const why = dns1123LabelProblem(s);
        if (why) throw new Error(`${why}, got ${JSON.stringify(s)}`);
        return s;
      }, 'default'),
      image: image ?? '',
      kubeconfig: get('kubeconfig', (v): KubeconfigSource => {
        const s = nonEmpty(v);
        if (s === 'auto') return { kind: 'auto' };
        if (s === 'in-cluster') return { kind: 'in-cluster' };
        return { kind: 'file', path: path.resolve(cwd, s) };
      }, { kind: 'auto' }),
      // Usually one (the Service); several, separated by commas, are tried in turn by the pod's agent.
      serverUrl: get('pod_server_url', (v) => list(v).map((s) => {
        let u: URL;
        try {
          u = new URL(s);
        } catch {
          throw new Error(`must be an http:// or https:// URL of the control plane as pods reach it (e.g. http://leoflow:7070), got ${JSON.stringify(s)}`);
        }
        if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new Error(`must be an http:// or https:// URL, got protocol ${JSON.stringify(u.protocol)}`);
        return s;
      }).join(',') || nonEmpty(''), ''),
      agentCommand: get('pod_agent_command', (v) => {
        const l = list(v);
        if (l.length === 0) throw new Error('must name a program, e.g. leoflow');
        return l;
      }, ['leoflow']),
      podPendingTimeoutMs: get('pod_pending_timeout', duration, 300_000),
      keepSucceededMs: get('pod_keep_succeeded', keep, 0),
      keepFailedMs: get('pod_keep_failed', keep, 3_600_000),
      agentTokenSecret: get('pod_agent_token_secret', (v) => {
        const [name, key = 'agent-token', ...rest] = nonEmpty(v).split('/');
        const why = rest.length > 0 ? 'has more than one "/"' : dns1123SubdomainProblem(name!);
        if (why) throw new Error(`must be SECRET or SECRET/KEY (a Secret's name, a DNS-1123 subdomain), got ${JSON.stringify(v)}: ${why}`);
        if (!/^[-._a-zA-Z0-9]+$/.test(key)) throw new Error(`the key must be letters, digits, "-", "_" or ".", got ${JSON.stringify(key)}`);
        return { name: name!, key };
      }, null as { name: string; key: string } | null),
      podCa: get('pod_ca', (v): PodCaSource => {
        const m = /^(secret|configmap):([^/]+)(?:\/(.+))?$/.exec(nonEmpty(v));
        const why = !m ? 'is not of that form' : dns1123SubdomainProblem(m[2]!) ?? (m[3] !== undefined && !/^[-._a-zA-Z0-9]+$/.test(m[3]) ? `the key must be letters, digits, "-", "_" or ".", got ${JSON.stringify(m[3])}` : null);
        if (why) throw new Error(`must be secret:NAME[/KEY] or configmap:NAME[/KEY] (the CA pods' agents verify the control plane with; KEY defaults to ca.crt), got ${JSON.stringify(v)}: ${why}`);
        return { kind: m![1] as PodCaSource['kind'], name: m![2]!, key: m![3] ?? 'ca.crt' };
      }, null as PodCaSource | null),
    };
    if (pick('pod_server_url', defaults) === undefined) problems.push('the kubernetes executor needs the address pods reach the control plane at: set --pod-server-url or LEOFLOW_POD_SERVER_URL (e.g. http://leoflow:7070)');
  }

  const tls = readTls();
  function readTls(): TlsConfig | null {
    const file = (v: unknown) => path.resolve(cwd, nonEmpty(v));
    const certRaw = pick('tls_cert', defaults);
    const keyRaw = pick('tls_key', defaults);
    const caRaw = pick('tls_client_ca', defaults);
    const authRaw = pick('tls_client_auth', defaults);
    const certFile = get('tls_cert', file, null as string | null);
    const keyFile = get('tls_key', file, null as string | null);
    const caFile = get('tls_client_ca', file, null as string | null);
    const clientAuth = get('tls_client_auth', oneOf(TLS_CLIENT_AUTH), 'agents');
    if (certFile === null && keyFile === null) {
      if (caRaw) problems.push(`${caRaw.source}: client certificates need TLS on the API port: set --tls-cert and --tls-key too`);
      if (authRaw) problems.push(`${authRaw.source}: only with --tls-client-ca (the CA client certificates are checked against)`);
      return null;
    }
    if (certFile === null || keyFile === null) {
      if (certRaw || keyRaw) problems.push(`${(certRaw ?? keyRaw)!.source}: TLS needs both a certificate and its key: set ${certFile === null ? '--tls-cert (LEOFLOW_TLS_CERT)' : '--tls-key (LEOFLOW_TLS_KEY)'} too`);
      return null;
    }
    if (authRaw && caFile === null && !caRaw) problems.push(`${authRaw.source}: only with --tls-client-ca (the CA client certificates are checked against)`);
    let pair: { cert: Buffer; key: Buffer } | null = null;
    try {
      pair = readCertificateAndKey(certFile, keyFile);
    } catch (err) {
      problems.push(`--tls-cert/--tls-key: ${(err as Error).message}`);
    }
    let clientCa: Buffer | null = null;
    if (caFile !== null) {
      try {
        clientCa = readCertificateFile(caFile).pem;
      } catch (err) {
        problems.push(`${caRaw!.source}: ${(err as Error).message}`);
      }
    }
    return pair ? { files: { cert: certFile, key: keyFile, clientCa: caFile }, cert: pair.cert, key: pair.key, clientCa, clientAuth } : null;
  }

  const replicaId = (v: unknown) => {
    const id = nonEmpty(v);
    if (!/^[A-Za-z0-9._-]+$/.test(id)) throw new Error(`must be letters, digits, '.', '_' or '-', got ${JSON.stringify(id)}`);
    if (id.length > MAX_REPLICA_ID) throw new Error(`must be at most ${MAX_REPLICA_ID} characters (it names the replica's Postgres sessions), got ${id.length}`);
    return id;
  };
  const role = get('role', oneOf(ROLES), 'auto');
  const dags = get('dags', list, []).map((d) => path.resolve(cwd, d));
  // An observer writes nothing through the API, and applying DAG files at start is a write.
  if (role === 'observer' && dags.length > 0) problems.push(`${pick('dags', defaults)!.source}: a replica with role observer applies no DAG files; apply them from a replica of another role`);

  const config: Config = {
    edition,
    // The host part is cut so the default always fits MAX_REPLICA_ID (a pod name can be 63 long).
    replicaId: get('replica_id', replicaId, `${os.hostname().replace(/[^A-Za-z0-9._-]/g, '-').slice(0, 24)}-${process.pid}-${randomBytes(2).toString('hex')}`),
    role,
    leaderTimeoutMs: get('leader_timeout', duration, 30_000),
    loopStallMs: 0, // below: its default follows the tick
    listenHost: listen.host,
    listenPort: listen.port,
    metricsListen,
    databaseUrl,
    stateDir: path.resolve(cwd, get('state_dir', nonEmpty, '.leoflow')),
    embeddedPgPort: get('embedded_pg_port', port, 54329),
    executor,
    dags,
    tickMs: get('tick_interval', duration, 1000),
    dispatchWorkers: get('dispatch_workers', positiveInt, 1),
    dispatchQueue: get('dispatch_queue', positiveInt, 1),
    runOrphanThresholdMs: get('run_orphan_threshold', duration, 300_000),
    heartbeatThresholdMs: get('heartbeat_threshold', duration, 90_000),
    heartbeatIntervalMs: get('heartbeat_interval', duration, 5_000),
    killGraceMs: get('kill_grace', duration, 10_000),
    shutdownGraceMs: get('shutdown_grace', duration, 30_000),
    leaderWatchdogMs: get('leader_watchdog', duration, 5_000),
    retentionMs: get('retention', retention('30d'), null as number | null),
    agentRetentionMs: get('agent_retention', retention('7d'), 7 * 86_400_000 as number | null),
    watchBufferEvents: get('watch_buffer', positiveInt, 10_000),
    otlpEndpoint: get('otlp_endpoint', otlpTracesUrl, null as string | null),
    agentToken: get('agent_token', nonEmpty, null as string | null),
    tls,
    authRequired: false, // below: it follows the edition, the address and --insecure
    insecure: get('insecure', (v) => {
      if (v === true || v === 'true' || v === '1') return true;
      if (v === false || v === 'false' || v === '0') return false;
      throw new Error(`must be true or false, got ${JSON.stringify(v)}`);
    }, false),
    bootstrapAdminToken: get('bootstrap_admin_token', (v) => {
      const t = nonEmpty(v);
      // It guards everything: as strong as the tokens we make (256 random bits, ~43 characters).
      if (t.length < 32) throw new Error(`must be at least 32 characters of a random secret (e.g. \`openssl rand -base64 32\`), got ${t.length}`);
      if (/\s/.test(t)) throw new Error('must hold no whitespace (it is sent in an authorization header)');
      return t;
    }, null as string | null),
    logLevel: get('log_level', oneOf(LOG_LEVELS), 'info'),
    logFormat: get('log_format', oneOf(LOG_FORMATS), process.stdout.isTTY ? 'pretty' : 'json'),
    kubernetes,
  };
  config.authRequired = !config.insecure && (edition === 'pro' || !isLoopback(config.listenHost));
  if (tls?.clientAuth === 'all' && kubernetes) {
    // A pod's agent has no certificate of its pod's name; with `agents` it proves itself with its attempt's token.
    problems.push(`${pick('tls_client_auth', defaults)!.source}: all cannot be used with the kubernetes executor: the TLS handshake would refuse every pod's agent, which has no client certificate; use agents (the default: agent streams need a certificate, or for a pod's agent its attempt's token)`);
  }
  if (config.heartbeatIntervalMs * 3 > config.heartbeatThresholdMs) {
    problems.push(
      `heartbeat_threshold (${config.heartbeatThresholdMs} ms) must be at least 3 × heartbeat_interval (${config.heartbeatIntervalMs} ms), or a live task could be reaped`,
    );
  }
  // Given, it must leave the loop room to keep its pace; not given, 60 s or five ticks, whichever
  // is longer (a slow tick must not make a healthy loop look stalled).
  const stall = get('loop_stall_threshold', duration, null as number | null);
  config.loopStallMs = stall ?? Math.max(60_000, 5 * config.tickMs);
  if (stall !== null && config.loopStallMs < 3 * config.tickMs) {
    problems.push(`loop_stall_threshold (${config.loopStallMs} ms) must be at least 3 × tick_interval (${config.tickMs} ms), or a loop keeping its pace would be called stalled`);
  }
  if (problems.length > 0) throw new ConfigError(problems);
  return config;
}

/**
 * An OTLP/HTTP endpoint as the traces URL: a collector's base (`http://collector:4318`) gets the
 * signal's path, as OTEL_EXPORTER_OTLP_ENDPOINT does; a URL with a path of its own is kept.
 */
function otlpTracesUrl(v: unknown): string | null {
  const s = String(v ?? '').trim();
  if (s === 'off' || s === '') return null;
  let u: URL;
  try {
    u = new URL(s);
  } catch {
    throw new Error(`must be an http:// or https:// URL of an OTLP/HTTP collector (e.g. http://127.0.0.1:4318), or off; got ${JSON.stringify(s)}`);
  }
  if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new Error(`must be an http:// or https:// URL (OTLP over HTTP), got protocol ${JSON.stringify(u.protocol)}`);
  if (u.pathname === '/' || u.pathname === '') u.pathname = '/v1/traces';
  return u.toString();
}
