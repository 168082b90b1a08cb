import { createHash, randomBytes } from 'node:crypto';

/**
 * W3C trace context (https://www.w3.org/TR/trace-context/) as Leoflow keeps it: a run's own
 * `traceparent` is stored with the run, and each attempt's is derived from it, so any replica,
 * the agent and the task's process agree on an attempt's span without storing one per attempt.
 */

/** A parsed `traceparent`: ids in lowercase hex. */
export interface TraceParent {
  traceId: string;
  spanId: string;
  /** The trace-flags byte; bit 0 is "sampled". */
  flags: number;
}

/** What travels with a run or an attempt: its traceparent, and the caller's tracestate if any. */
export interface TraceContext {
  traceparent: string;
  tracestate: string | null;
}

const TRACEPARENT = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$/;
/** The spec's bound on tracestate: 32 members of at most 256 characters and their commas. */
const MAX_TRACESTATE = 32 * 257;

/**
 * A `traceparent` header as the spec reads it, or null when it must be ignored: malformed, an
 * all-zero id, version ff, or a version-00 header with anything after the flags. A later version
 * is read by its first four fields, as the spec asks.
 */
export function parseTraceparent(header: string | null | undefined): TraceParent | null {
  if (!header) return null;
  const m = TRACEPARENT.exec(header.trim());
  if (!m) return null;
  const [, version, traceId, spanId, flags, rest] = m;
  if (version === 'ff' || (version === '00' && rest !== undefined)) return null;
  if (/^0+$/.test(traceId!) || /^0+$/.test(spanId!)) return null;
  return { traceId: traceId!, spanId: spanId!, flags: parseInt(flags!, 16) };
}

/** A tracestate header kept as sent, or null when absent or past the spec's size. */
export function parseTracestate(header: string | null | undefined): string | null {
  const v = header?.trim();
  return v && v.length <= MAX_TRACESTATE && /^[\x20-\x7e]*$/.test(v) ? v : null;
}

export function formatTraceparent(p: TraceParent): string {
  return `00-${p.traceId}-${p.spanId}-${(p.flags & 0xff).toString(16).padStart(2, '0')}`;
}

export function isSampled(p: TraceParent): boolean {
  return (p.flags & 1) === 1;
}

/**
 * The span id of one attempt of a task instance in the run whose span is `runSpanId`: a hash, so
 * the dispatcher, the executor and the span recorder (on whichever replica) name the same span.
 */
export function attemptSpanId(runSpanId: string, tiId: string, tryNumber: number): string {
  const id = createHash('sha256').update(`${runSpanId}:${tiId}:${tryNumber}`).digest('hex').slice(0, 16);
  return /^0+$/.test(id) ? '0000000000000001' : id;
}

/** An attempt's trace context: the run's trace, the attempt's span, the run's flags and state. */
export function attemptTraceContext(run: TraceContext, tiId: string, tryNumber: number): TraceContext | null {
  const p = parseTraceparent(run.traceparent);
  if (!p) return null;
  return {
    traceparent: formatTraceparent({ ...p, spanId: attemptSpanId(p.spanId, tiId, tryNumber) }),
    tracestate: run.tracestate,
  };
}

/**
 * A new run's trace context: a child of the caller's span when it was triggered with one (same
 * trace, same flags, its tracestate kept), else a trace of its own, sampled.
 */
export function newRunTrace(
  caller: TraceParent | null,
  tracestate: string | null,
): { traceparent: string; parentSpan: string | null; tracestate: string | null } {
  const spanId = randomBytes(8).toString('hex');
  if (caller)
    return {
      traceparent: formatTraceparent({ traceId: caller.traceId, spanId, flags: caller.flags }),
      parentSpan: caller.spanId,
      tracestate,
    };
  return {
    traceparent: formatTraceparent({ traceId: randomBytes(16).toString('hex'), spanId, flags: 1 }),
    parentSpan: null,
    tracestate: null,
  };
}
