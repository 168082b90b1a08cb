/**
 * Whether an error means "the database could not be reached", decided by code, never by message
 * text: SQLSTATE class 08 (connection exception), 57P01–57P03 (admin/crash shutdown, cannot
 * connect now), 53300 (too many connections), and the drivers' and OS's connection errors.
 */
const SQLSTATE_PREFIXES = ['08'];
const SQLSTATES = new Set(['57P01', '57P02', '57P03', '53300']);
const DRIVER_CODES = new Set([
  'CONNECTION_CLOSED',
  'CONNECTION_ENDED',
  'CONNECTION_DESTROYED',
  'CONNECT_TIMEOUT',
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'EPIPE',
  'EHOSTUNREACH',
  'ENETUNREACH',
]);

export function isConnectionError(err: unknown): boolean {
  for (let e: unknown = err, depth = 0; e && depth < 5; e = (e as { cause?: unknown }).cause, depth++) {
    const code = (e as { code?: unknown }).code;
    if (typeof code !== 'string') continue;
    if (SQLSTATES.has(code) || DRIVER_CODES.has(code) || SQLSTATE_PREFIXES.some((p) => code.startsWith(p))) return true;
  }
  return false;
}
