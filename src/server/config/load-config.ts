// Loading a replica's configuration: each setting taken from flag, environment or edition file,
// compiled, and the whole checked once, with the checks that span several settings.
import { randomBytes } from 'node:crypto';
import os from 'node:os';
import { OUTPUT_BYTES } from '../../core/task-output.js';
import path from 'node:path';
import { LOG_FORMATS, LOG_LEVELS } from '../../core/logger.js';
import { EDITIONS, EXECUTORS, MAX_REPLICA_ID, ROLES, type Config, type Edition } from './config.js';
import { ConfigError } from './config-error.js';
import { editionDefaults } from './edition-defaults.js';
import { isLoopback } from './is-loopback.js';
import { readKubernetesConfig } from './read-kubernetes-config.js';
import { readTlsConfig } from './read-tls-config.js';
import { readHooks, type Hook } from './read-hooks.js';
import { NO_NOTIFY, readNotifyFile } from './read-notify-file.js';
import {
  agentUrl,
  positiveDuration,
  hostPort,
  list,
  nonEmpty,
  oneOf,
  otlpTracesUrl,
  port,
  positiveInt,
  outputSize,
  retention,
} from './setting-parsers.js';
import { SETTINGS, type Raw, type SettingKey, type SettingReader } from './settings.js';

/**
 * Raw → defaulted → compiled and validated, once, at start-up. Precedence: flag, then
 * environment variable, then the edition file. Every problem is reported, not just the first.
 */
export function loadConfig(
  flags: Partial<Record<SettingKey, string | string[]>>,
  env: NodeJS.ProcessEnv = process.env,
  cwd = process.cwd(),
): Config {
  const problems: string[] = [];
  const pick = (key: SettingKey, defaults: Record<string, unknown> | null): Raw | undefined => {
    const s = SETTINGS[key];
    if (flags[key] !== undefined) return { value: flags[key], source: s.flag };
    if (env[s.env] !== undefined && env[s.env] !== '') return { value: env[s.env], source: `${s.env} (environment)` };
    if (defaults && defaults[key] !== undefined)
      return { value: defaults[key], source: `editions/${String(defaults.edition)}/config.json ${key}` };
    return undefined;
  };

  const editionRaw = pick('edition', null) ?? { value: 'lite', source: 'default' };
  let edition: Edition = 'lite';
  if ((EDITIONS as readonly unknown[]).includes(editionRaw.value)) edition = editionRaw.value as Edition;
  else
    problems.push(
      `${editionRaw.source}: must be one of ${EDITIONS.join(', ')}, got ${JSON.stringify(editionRaw.value)}`,
    );
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
  const reader: SettingReader = { pick: (key) => pick(key, defaults), get, problems, cwd };

  const listen = get('listen', hostPort('127.0.0.1:7070'), { host: '127.0.0.1', port: 7070 });
  const metricsListen = get('metrics_listen', (v) => (v === 'off' ? null : hostPort('127.0.0.1:9464 or off')(v)), null);

  const database = get(
    'database',
    (v) => {
      const s = nonEmpty(v);
      if (s === 'embedded' || s === 'required') return s;
      let u: URL;
      try {
        u = new URL(s);
      } catch {
        throw new Error(`must be a postgres:// URL, got ${JSON.stringify(s)}`);
      }
      if (u.protocol !== 'postgres:' && u.protocol !== 'postgresql:')
        throw new Error(`must be a postgres:// URL, got protocol ${JSON.stringify(u.protocol)}`);
      return s;
    },
    'embedded',
  );
  let databaseUrl: string | null = null;
  if (database === 'required')
    problems.push(`the ${edition} edition needs a Postgres server: set DATABASE_URL or --database-url`);
  else if (database === 'embedded') {
    if (edition !== 'lite')
      problems.push(`the embedded Postgres is for the lite edition only: set DATABASE_URL or --database-url`);
  } else databaseUrl = database;

  const executor = get('executor', oneOf(EXECUTORS), 'subprocess');
  // Read only for the executor that uses them: a Lite replica is not asked for an image.
  const kubernetes = executor === 'kubernetes' ? readKubernetesConfig(reader) : null;

  const tls = readTlsConfig(reader);

  const replicaId = (v: unknown) => {
    const id = nonEmpty(v);
    if (!/^[A-Za-z0-9._-]+$/.test(id))
      throw new Error(`must be letters, digits, '.', '_' or '-', got ${JSON.stringify(id)}`);
    if (id.length > MAX_REPLICA_ID)
      throw new Error(
        `must be at most ${MAX_REPLICA_ID} characters (it names the replica's Postgres sessions), got ${id.length}`,
      );
    return id;
  };
  const role = get('role', oneOf(ROLES), 'auto');
  const dags = get('dags', list, []).map((d) => path.resolve(cwd, d));
  // An observer writes nothing through the API, and applying DAG files at start is a write.
  if (role === 'observer' && dags.length > 0)
    problems.push(
      `${pick('dags', defaults)!.source}: a replica with role observer applies no DAG files; ` +
        `apply them from a replica of another role`,
    );

  const config: Config = {
    edition,
    // The host part is cut so the default always fits MAX_REPLICA_ID (a pod name can be 63 long).
    replicaId: get(
      'replica_id',
      replicaId,
      `${os
        .hostname()
        .replace(/[^A-Za-z0-9._-]/g, '-')
        .slice(0, 24)}-${process.pid}-${randomBytes(2).toString('hex')}`,
    ),
    role,
    leaderTimeoutMs: get('leader_timeout', positiveDuration, 30_000),
    loopStallMs: 0, // below: its default follows the tick
    listenHost: listen.host,
    listenPort: listen.port,
    advertiseUrl: get('advertise_url', agentUrl, null as string | null),
    metricsListen,
    databaseUrl,
    stateDir: path.resolve(cwd, get('state_dir', nonEmpty, '.leoflow')),
    embeddedPgPort: get('embedded_pg_port', port, 54329),
    executor,
    dags,
    tickMs: get('tick_interval', positiveDuration, 1000),
    dispatchWorkers: get('dispatch_workers', positiveInt, 1),
    dispatchQueue: get('dispatch_queue', positiveInt, 1),
    runOrphanThresholdMs: get('run_orphan_threshold', positiveDuration, 300_000),
    heartbeatThresholdMs: get('heartbeat_threshold', positiveDuration, 90_000),
    heartbeatIntervalMs: get('heartbeat_interval', positiveDuration, 5_000),
    killGraceMs: get('kill_grace', positiveDuration, 10_000),
    maxOutputBytes: get('max_output_size', outputSize, OUTPUT_BYTES.default as number),
    shutdownGraceMs: get('shutdown_grace', positiveDuration, 30_000),
    leaderWatchdogMs: get('leader_watchdog', positiveDuration, 5_000),
    retentionMs: get('retention', retention('30d'), null as number | null),
    agentRetentionMs: get('agent_retention', retention('7d'), (7 * 86_400_000) as number | null),
    watchBufferEvents: get('watch_buffer', positiveInt, 10_000),
    maxTokenStreams: get('max_token_streams', positiveInt, 256),
    maxTokenWatches: get('max_token_watches', positiveInt, 64),
    maxTokenFollows: get('max_token_follows', positiveInt, 64),
    maxTokenWrites: get('max_token_writes', positiveInt, 20),
    maxTokenConcurrentWrites: get('max_token_concurrent_writes', positiveInt, 4),
    maxTokenAgents: get('max_token_agents', positiveInt, 1000),
    maxHostConnections: get('max_host_connections', positiveInt, 256),
    idleConnectionTimeoutMs: get('idle_connection_timeout', positiveDuration, 60_000),
    otlpEndpoint: get('otlp_endpoint', otlpTracesUrl, null as string | null),
    agentToken: get('agent_token', nonEmpty, null as string | null),
    tls,
    authRequired: false, // below: it follows the edition, the address and --insecure
    insecure: get(
      'insecure',
      (v) => {
        if (v === true || v === 'true' || v === '1') return true;
        if (v === false || v === 'false' || v === '0') return false;
        throw new Error(`must be true or false, got ${JSON.stringify(v)}`);
      },
      false,
    ),
    bootstrapAdminToken: get(
      'bootstrap_admin_token',
      (v) => {
        const t = nonEmpty(v);
        // It guards everything: as strong as the tokens we make (256 random bits, ~43 characters).
        if (t.length < 32)
          throw new Error(
            `must be at least 32 characters of a random secret (e.g. \`openssl rand -base64 32\`), got ${t.length}`,
          );
        if (/\s/.test(t)) throw new Error('must hold no whitespace (it is sent in an authorization header)');
        return t;
      },
      null as string | null,
    ),
    logLevel: get('log_level', oneOf(LOG_LEVELS), 'info'),
    logFormat: get('log_format', oneOf(LOG_FORMATS), process.stdout.isTTY ? 'pretty' : 'json'),
    kubernetes,
    hooks: get('hooks', (v) => readHooks(path.resolve(cwd, nonEmpty(v)), cwd), [] as Hook[]),
    notify: get('notify', (v) => readNotifyFile(path.resolve(cwd, nonEmpty(v)), cwd), NO_NOTIFY),
  };
  config.authRequired = !config.insecure && (edition === 'pro' || !isLoopback(config.listenHost));
  if (config.advertiseUrl && config.advertiseUrl.startsWith('https:') !== (tls !== null)) {
    // Agents told this address would fail the handshake (or send plain text to a TLS port).
    const serves = tls
      ? 'https:// as this replica serves TLS (--tls-cert)'
      : 'http:// as this replica serves plain HTTP (no --tls-cert)';
    problems.push(`${pick('advertise_url', defaults)!.source}: must be ${serves}, got ${config.advertiseUrl}`);
  }
  if (tls?.clientAuth === 'all' && kubernetes) {
    // A pod's agent has no certificate of its pod's name; with `agents` it proves itself with its attempt's token.
    problems.push(
      `${pick('tls_client_auth', defaults)!.source}: all cannot be used with the kubernetes executor: ` +
        `the TLS handshake would refuse every pod's agent, which has no client certificate; ` +
        `use agents (the default: agent streams need a certificate, or for a pod's agent its attempt's token)`,
    );
  }
  if (config.heartbeatIntervalMs * 3 > config.heartbeatThresholdMs) {
    problems.push(
      `heartbeat_threshold (${config.heartbeatThresholdMs} ms) ` +
        `must be at least 3 × heartbeat_interval (${config.heartbeatIntervalMs} ms), or a live task could be reaped`,
    );
  }
  // Given, it must leave the loop room to keep its pace; not given, 60 s or five ticks, whichever
  // is longer (a slow tick must not make a healthy loop look stalled).
  const stall = get('loop_stall_threshold', positiveDuration, null as number | null);
  config.loopStallMs = stall ?? Math.max(60_000, 5 * config.tickMs);
  if (stall !== null && config.loopStallMs < 3 * config.tickMs) {
    problems.push(
      `loop_stall_threshold (${config.loopStallMs} ms) must be at least 3 × tick_interval (${config.tickMs} ms), ` +
        `or a loop keeping its pace would be called stalled`,
    );
  }
  if (problems.length > 0) throw new ConfigError(problems);
  return config;
}
