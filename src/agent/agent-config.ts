/**
 * The `leoflow agent` flags: raw strings → defaulted → validated, in one function, with every
 * problem reported at once and each message naming its flag.
 */

import { RESERVED_CAPABILITY_PREFIX } from '../core/agent-features.js';
import { parseDuration } from '../core/duration.js';
import { LOG_FORMATS, LOG_LEVELS } from '../core/logger.js';

export type ShutdownMode = 'finish' | 'handback';
export const SHUTDOWN_MODES: readonly ShutdownMode[] = ['finish', 'handback'];

/** The flags as commander hands them over (absent when not given). */
export interface AgentFlags {
  /** One address, or several separated by commas (a repeated --server arrives joined so). */
  server?: string;
  id?: string;
  labels?: string;
  capabilities?: string;
  slots?: string;
  token?: string;
  once?: boolean;
  ti?: string;
  onShutdown?: string;
  shutdownGrace?: string;
  killGrace?: string;
  stateDir?: string;
  logFormat?: string;
  logLevel?: string;
  /** PEM CA an https:// server must chain to (global --ca-file). */
  caFile?: string;
  /** The agent's TLS client certificate and key, for a control plane with --tls-client-ca. */
  tlsCert?: string;
  tlsKey?: string;
}

/** Facts about the process that defaults depend on; passed in so parsing stays pure. */
export interface AgentEnvironment {
  hostname: string;
  pid: number;
  isTTY: boolean;
  /** LEOFLOW_AGENT_TOKEN. */
  token?: string | undefined;
  /** LEOFLOW_ATTEMPT_TOKEN: the attempt a one-shot agent was started for (set in a pod's env). */
  attemptToken?: string | undefined;
  /** LEOFLOW_CA_FILE, LEOFLOW_AGENT_TLS_CERT, LEOFLOW_AGENT_TLS_KEY. */
  caFile?: string | undefined;
  tlsCert?: string | undefined;
  tlsKey?: string | undefined;
}

export interface AgentConfig {
  /** The control-plane replicas to connect to, tried in turn (at least one). */
  serverUrls: string[];
  agentId: string;
  labels: Record<string, string>;
  capabilities: string[];
  slots: number;
  token: string;
  /** The task instance of a one-shot agent (`--once --ti ID`); null for a long-lived agent. */
  onlyTiId: string | null;
  /** With onlyTiId, from LEOFLOW_ATTEMPT_TOKEN: run exactly this attempt of it, never claim one. */
  onlyAttemptToken: string | null;
  onShutdown: ShutdownMode;
  shutdownGraceMs: number;
  killGraceMs: number;
  /** Where the shims of this agent's tasks keep their output and exit status, so that a
   *  restarted agent with the same id re-attaches to them. */
  stateDir: string;
  logFormat: (typeof LOG_FORMATS)[number];
  logLevel: (typeof LOG_LEVELS)[number];
  /** Files read at start (the command reads them): the CA and the client certificate; null when not given. */
  caFile: string | null;
  tlsCertFile: string | null;
  tlsKeyFile: string | null;
}

export class AgentConfigError extends Error {
  readonly problems: string[];
  constructor(problems: string[]) {
    super(problems.join('\n'));
    this.name = 'AgentConfigError';
    this.problems = problems;
  }
}

/** As Hello.agent_id allows: letters, digits, '_', '.', '-', ':'. */
const AGENT_ID = /^[A-Za-z0-9_.:-]+$/;
const INT64_MAX = 2n ** 63n - 1n;
/** More addresses than this is a mistake, not a cluster. */
export const MAX_SERVERS = 16;

export function parseAgentFlags(flags: AgentFlags, env: AgentEnvironment): AgentConfig {
  const problems: string[] = [];
  /** Runs one check; a throw becomes a problem prefixed with the flag. */
  const check = <T>(flag: string, fallback: T, fn: () => T): T => {
    try {
      return fn();
    } catch (err) {
      problems.push(`${flag}: ${(err as Error).message}`);
      return fallback;
    }
  };

  const serverUrls = check('--server', [], () => parseServerUrls(flags.server ?? 'http://127.0.0.1:7070'));
  const agentId = check('--id', '', () => {
    if (flags.id === undefined) return defaultAgentId(env.hostname, env.pid);
    if (!AGENT_ID.test(flags.id))
      throw new Error(`must be letters, digits, '_', '.', '-' or ':', got ${JSON.stringify(flags.id)}`);
    return flags.id;
  });
  const labels = check('--labels', {}, () => parseLabels(flags.labels ?? ''));
  const capabilities = check('--capabilities', [], () => parseCapabilities(flags.capabilities ?? ''));
  const slots = check('--slots', 1, () => positiveInteger(flags.slots ?? '1'));

  let onlyTiId: string | null = null;
  if (flags.once && flags.ti === undefined) problems.push('--once: requires --ti ID (the task instance to run)');
  else if (!flags.once && flags.ti !== undefined) problems.push('--ti: only with --once');
  else if (flags.ti !== undefined) onlyTiId = check('--ti', null, () => taskInstanceId(flags.ti!));

  let onlyAttemptToken: string | null = null;
  if (env.attemptToken !== undefined && env.attemptToken !== '') {
    if (onlyTiId === null) problems.push('LEOFLOW_ATTEMPT_TOKEN: only with --once --ti ID');
    else if (!/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i.test(env.attemptToken))
      problems.push(
        `LEOFLOW_ATTEMPT_TOKEN: must be an attempt token (a UUID), got ${JSON.stringify(env.attemptToken)}`,
      );
    else onlyAttemptToken = env.attemptToken;
  }

  const onShutdown = check('--on-shutdown', 'finish', () => oneOf(flags.onShutdown ?? 'finish', SHUTDOWN_MODES));
  const shutdownGraceMs = check('--shutdown-grace', 30_000, () => parseDuration(flags.shutdownGrace ?? '30s'));
  const killGraceMs = check('--kill-grace', 10_000, () => parseDuration(flags.killGrace ?? '10s'));
  const stateDir = check('--state-dir', '', () => {
    const dir = flags.stateDir ?? `.leoflow/agents/${agentId}`;
    if (dir.trim() === '' || dir.includes('\0'))
      throw new Error(`must be a directory path, got ${JSON.stringify(dir)}`);
    return dir;
  });
  const logFormat = check('--log-format', 'json', () =>
    oneOf(flags.logFormat ?? (env.isTTY ? 'pretty' : 'json'), LOG_FORMATS),
  );
  const logLevel = check('--log-level', 'info', () => oneOf(flags.logLevel ?? 'info', LOG_LEVELS));

  const caFile = flags.caFile || env.caFile || null;
  const tlsCertFile = flags.tlsCert || env.tlsCert || null;
  const tlsKeyFile = flags.tlsKey || env.tlsKey || null;
  if ((tlsCertFile === null) !== (tlsKeyFile === null))
    problems.push(
      `${tlsCertFile === null ? '--tls-cert' : '--tls-key'}: ` +
        `a client certificate needs both --tls-cert and --tls-key (LEOFLOW_AGENT_TLS_CERT, LEOFLOW_AGENT_TLS_KEY)`,
    );
  const plain = serverUrls.filter((u) => !u.startsWith('https:'));
  if ((caFile !== null || tlsCertFile !== null) && plain.length > 0)
    problems.push(
      `--server: ${caFile !== null ? '--ca-file' : '--tls-cert'} is for https:// addresses, ` +
        `but ${plain.join(', ')} ${plain.length === 1 ? 'is' : 'are'} plain http://`,
    );

  if (problems.length > 0) throw new AgentConfigError(problems);
  return {
    caFile,
    tlsCertFile,
    tlsKeyFile,
    serverUrls,
    agentId,
    labels,
    capabilities,
    slots,
    token: flags.token ?? env.token ?? '',
    onlyTiId,
    onlyAttemptToken,
    onShutdown,
    shutdownGraceMs,
    killGraceMs,
    stateDir,
    logFormat,
    logLevel,
  };
}

/** `gpu=nvidia,zone=a` → { gpu: 'nvidia', zone: 'a' }; an empty string is no labels. */
export function parseLabels(raw: string): Record<string, string> {
  const labels: Record<string, string> = {};
  if (raw.trim() === '') return labels;
  for (const item of raw.split(',')) {
    const eq = item.indexOf('=');
    const key = eq === -1 ? '' : item.slice(0, eq).trim();
    if (key === '') throw new Error(`expected k=v pairs separated by commas, got ${JSON.stringify(item)}`);
    if (Object.hasOwn(labels, key)) throw new Error(`label ${JSON.stringify(key)} given twice`);
    labels[key] = item.slice(eq + 1).trim();
  }
  return labels;
}

/** `docker,python3` → ['docker', 'python3']; an empty string is none. */
export function parseCapabilities(raw: string): string[] {
  if (raw.trim() === '') return [];
  const names = raw.split(',').map((s) => s.trim());
  const bad = names.find((n) => n === '' || /[\s=]/.test(n));
  if (bad !== undefined) throw new Error(`expected names separated by commas, got ${JSON.stringify(raw)}`);
  const reserved = names.find((n) => n.startsWith(RESERVED_CAPABILITY_PREFIX));
  if (reserved !== undefined)
    throw new Error(
      `${JSON.stringify(reserved)}: ` +
        `names starting with "${RESERVED_CAPABILITY_PREFIX}" are the protocol features the agent announces itself`,
    );
  return [...new Set(names)];
}

/** hostname-pid, with anything Hello.agent_id does not allow replaced by '-'. */
export function defaultAgentId(hostname: string, pid: number): string {
  const host = hostname.replace(/[^A-Za-z0-9_.:-]/g, '-') || 'agent';
  return `${host}-${pid}`;
}

/**
 * `http://a:7070,http://b:7070` → both, each checked: the error names the bad address (and its
 * place when there are several), a duplicate, or too many.
 */
export function parseServerUrls(raw: string): string[] {
  const items = raw.split(',').map((s) => s.trim());
  if (items.length > MAX_SERVERS) throw new Error(`at most ${MAX_SERVERS} addresses, got ${items.length}`);
  const urls: string[] = [];
  items.forEach((item, i) => {
    const where = items.length > 1 ? `address ${i + 1} of ${items.length}: ` : '';
    if (item === '') throw new Error(`${where}empty address in ${JSON.stringify(raw)}`);
    if (!isHttpUrl(item)) throw new Error(`${where}expected an http:// or https:// URL, got ${JSON.stringify(item)}`);
    if (urls.includes(item)) throw new Error(`${where}${JSON.stringify(item)} given twice`);
    urls.push(item);
  });
  return urls;
}

function isHttpUrl(raw: string): boolean {
  try {
    const url = new URL(raw);
    return url.protocol === 'http:' || url.protocol === 'https:';
  } catch {
    return false;
  }
}

function positiveInteger(raw: string): number {
  const n = /^\d+$/.test(raw) ? Number(raw) : NaN;
  if (!Number.isSafeInteger(n) || n < 1 || n > 2 ** 31 - 1)
    throw new Error(`must be a positive integer, got ${JSON.stringify(raw)}`);
  return n;
}

function taskInstanceId(raw: string): string {
  if (!/^[1-9]\d{0,18}$/.test(raw) || BigInt(raw) > INT64_MAX)
    throw new Error(`must be a task instance id (a positive integer), got ${JSON.stringify(raw)}`);
  return raw;
}

function oneOf<T extends string>(raw: string, allowed: readonly T[]): T {
  if (!(allowed as readonly string[]).includes(raw))
    throw new Error(`must be one of ${allowed.join(', ')}, got ${JSON.stringify(raw)}`);
  return raw as T;
}
