// A setting's compile functions: the value as given in, the value checked and converted out, or a
// throw whose message `loadConfig` prefixes with where the value came from.
import { parseDuration } from '../../core/duration.js';
import { OUTPUT_BYTES } from '../../core/task-output.js';

/** A positive duration (`30s`, `5m`) in ms, at most 24 days. */
export const positiveDuration = (v: unknown) => {
  const ms = parseDuration(v);
  if (ms <= 0) throw new Error(`must be a positive duration, got ${JSON.stringify(v)}`);
  // Node timers hold at most 2^31−1 ms; a longer one would fire at once.
  if (ms > 24 * 86_400_000) throw new Error(`must be at most 24d, got ${JSON.stringify(v)}`);
  return ms;
};

/** An integer of 1 or more. */
export const positiveInt = (v: unknown) => {
  const n = typeof v === 'number' ? v : /^\s*\d+\s*$/.test(String(v)) ? Number(v) : NaN;
  if (!Number.isInteger(n) || n < 1) throw new Error(`must be a positive integer, got ${JSON.stringify(v)}`);
  return n;
};

/** A TCP port, 1-65535. */
export const port = (v: unknown) => {
  const n = positiveInt(v);
  if (n > 65535) throw new Error(`must be a TCP port (1-65535), got ${JSON.stringify(v)}`);
  return n;
};

/** One of a closed set of strings. */
export const oneOf =
  <T extends string>(allowed: readonly T[]) =>
  (v: unknown): T => {
    if (!(allowed as readonly unknown[]).includes(v))
      throw new Error(`must be one of ${allowed.join(', ')}, got ${JSON.stringify(v)}`);
    return v as T;
  };

/** A string with something besides whitespace, trimmed. */
export const nonEmpty = (v: unknown) => {
  if (typeof v !== 'string' || v.trim() === '') throw new Error(`must be a non-empty string, got ${JSON.stringify(v)}`);
  return v.trim();
};

/**
 * A retention: a duration with a unit, or off (or 0) for null. A plain number would be seconds to
 * parseDuration, and "30" means 30 days to most readers of a retention setting: only 0 may go
 * without a unit.
 */
export const retention = (example: string) => (v: unknown) => {
  if (v === 'off' || v === 0 || v === '0') return null;
  if (typeof v === 'number' || /^\s*\d+\s*$/.test(String(v)))
    throw new Error(`must be a duration with a unit, such as ${example}, or off (or 0), got ${JSON.stringify(v)}`);
  const ms = parseDuration(v);
  if (ms <= 0) throw new Error(`must be a positive duration such as ${example}, or off, got ${JSON.stringify(v)}`);
  return ms;
};

/** A list, given as an array (edition file) or comma-separated (flag, environment). */
export const list = (v: unknown) =>
  (Array.isArray(v) ? v.map(String) : String(v).split(',')).map((s) => s.trim()).filter(Boolean);

/** HOST:PORT (an IPv6 host in brackets) as host and port. */
export const hostPort = (example: string) => (v: unknown) => {
  const m = /^(\[[0-9a-fA-F:]+\]|[A-Za-z0-9.-]+):(\d+)$/.exec(String(v));
  if (!m) throw new Error(`must be HOST:PORT (e.g. ${example}), got ${JSON.stringify(v)}`);
  const p = Number(m[2]);
  if (p < 0 || p > 65535) throw new Error(`has an invalid port ${m[2]}`);
  return { host: m[1]!.replace(/^\[|\]$/g, ''), port: p };
};

/**
 * An OTLP/HTTP endpoint as the traces URL: a collector's base (`http://collector:4318`) gets the
 * signal's path, as OTEL_EXPORTER_OTLP_ENDPOINT does; a URL with a path of its own is kept.
 */
export function otlpTracesUrl(v: unknown): string | null {
  const s = String(v ?? '').trim();
  if (s === 'off' || s === '') return null;
  let u: URL;
  try {
    u = new URL(s);
  } catch {
    throw new Error(
      `must be an http:// or https:// URL of an OTLP/HTTP collector (e.g. http://127.0.0.1:4318), or off; ` +
        `got ${JSON.stringify(s)}`,
    );
  }
  if (u.protocol !== 'http:' && u.protocol !== 'https:')
    throw new Error(`must be an http:// or https:// URL (OTLP over HTTP), got protocol ${JSON.stringify(u.protocol)}`);
  if (u.pathname === '/' || u.pathname === '') u.pathname = '/v1/traces';
  return u.toString();
}

/** An http:// or https:// URL with a host and no path, as agents dial it (`--advertise-url`). */
export function agentUrl(v: unknown): string {
  const s = nonEmpty(v);
  let u: URL;
  try {
    u = new URL(s);
  } catch {
    throw new Error(
      `must be the http:// or https:// URL agents reach this replica at (e.g. http://10.0.0.5:7070), ` +
        `got ${JSON.stringify(s)}`,
    );
  }
  if (u.protocol !== 'http:' && u.protocol !== 'https:')
    throw new Error(`must be an http:// or https:// URL, got protocol ${JSON.stringify(u.protocol)}`);
  if (u.pathname !== '/' || u.search || u.hash)
    throw new Error(`must name a host and port only, no path, got ${JSON.stringify(s)}`);
  return `${u.protocol}//${u.host}`;
}

const SIZE_UNITS: Record<string, number> = { '': 1, b: 1, k: 1024, kib: 1024, m: 1024 * 1024, mib: 1024 * 1024 };

/** A task output's size limit: bytes, or `64KiB`, `1MiB` (K and M count 1024), from 1 byte to OUTPUT_BYTES.max. */
export const outputSize = (v: unknown) => {
  const m = /^\s*(\d+)\s*([a-z]*)\s*$/i.exec(String(v));
  const unit = m ? SIZE_UNITS[m[2]!.toLowerCase()] : undefined;
  const n = m && unit !== undefined ? Number(m[1]) * unit : NaN;
  if (!Number.isInteger(n) || n < 1)
    throw new Error(`must be a size in bytes, or with KiB or MiB (e.g. 256KiB), got ${JSON.stringify(v)}`);
  if (n > OUTPUT_BYTES.max)
    throw new Error(`must be at most 1MiB (${OUTPUT_BYTES.max} bytes), got ${JSON.stringify(v)}`);
  return n;
};
