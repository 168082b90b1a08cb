/**
 * What an answer of the API server to a pod create means for the attempt, by status code (never
 * by matching messages, except quota, which the API reports only as a 403 message): the pod is
 * there already, the request is refused for good (fail the attempt, its retries apply), or it may
 * work later (retry, after Retry-After when the server gives one).
 */

export type ApiVerdict =
  | { kind: 'exists' }
  | { kind: 'refused'; code: number; reason: string; message: string }
  | { kind: 'retry'; reason: string; afterMs: number | null; message: string };

interface StatusBody {
  reason?: string;
  message?: string;
}

function parseBody(body: unknown): StatusBody {
  if (typeof body === 'string') {
    try {
      return JSON.parse(body) as StatusBody;
    } catch {
      return { message: body };
    }
  }
  return typeof body === 'object' && body !== null ? (body as StatusBody) : {};
}

/** Retry-After in seconds (the API server's form), as ms; null when absent or not a number. */
function retryAfterMs(headers: unknown): number | null {
  const h = headers as Record<string, string | undefined> | undefined;
  const v = h?.['retry-after'] ?? h?.['Retry-After'];
  if (v === undefined) return null;
  const s = Number(v);
  return Number.isFinite(s) && s >= 0 ? s * 1000 : null;
}

export function apiVerdict(err: unknown): ApiVerdict {
  const e = err as { code?: unknown; body?: unknown; headers?: unknown; message?: string };
  const code = typeof e.code === 'number' ? e.code : null;
  if (code === null) {
    // No answer at all (connection refused or reset, a timeout): the server may be back soon.
    return { kind: 'retry', reason: 'Unreachable', afterMs: null, message: (e.message ?? String(err)).split('\n')[0]! };
  }
  const status = parseBody(e.body);
  const message = (status.message ?? '').slice(0, 500);
  if (code === 409) return { kind: 'exists' };
  if (code === 429 || code >= 500)
    return {
      kind: 'retry',
      reason: status.reason ?? (code === 429 ? 'TooManyRequests' : 'InternalError'),
      afterMs: retryAfterMs(e.headers),
      message,
    };
  if (code === 403 && /exceeded quota/i.test(message))
    return { kind: 'refused', code, reason: 'QuotaExceeded', message };
  const fallback: Record<number, string> = {
    400: 'BadRequest',
    401: 'Unauthorized',
    403: 'Forbidden',
    404: 'NotFound',
    422: 'Invalid',
  };
  return { kind: 'refused', code, reason: status.reason ?? fallback[code] ?? `HTTP${code}`, message };
}
