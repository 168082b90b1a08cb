import { SpanKind } from '@opentelemetry/api';
import { TERMINAL_RUN_STATES } from '../core/states.js';
import { attemptSpanId, formatTraceparent, parseTraceparent, type TraceParent } from '../core/trace-context.js';
import type { StateEvent, TracedRun } from '../db/trace/trace-sources.js';
import type { SpanRecord } from './tracing.js';

/**
 * The moves that end an attempt: its outcome or a cancel. A claim given back (→ scheduled) does
 * not: the next claim takes the same try number, so it is the same attempt, started later.
 */
const ATTEMPT_ENDS = new Set(['success', 'failed', 'up_for_retry', 'cancelled']);
const RUN_ENDS = new Set<string>(TERMINAL_RUN_STATES);

interface OpenAttempt {
  tryNumber: number;
  queuedAt: Date;
  startedAt: Date | null;
  agentId: string | null;
}

/** The ti.state and run.state events a batch of the log holds that end something. */
export function endsIn(
  batch: readonly { kind: string; run_id: string | null; ti_id: string | null; payload: Record<string, unknown> }[],
): { runIds: string[]; tiIds: string[]; endedRunIds: string[] } {
  const runIds = new Set<string>();
  const tiIds = new Set<string>();
  const endedRunIds = new Set<string>();
  for (const e of batch) {
    if (e.run_id === null) continue;
    const to = String(e.payload.to);
    if (e.kind === 'ti.state' && e.ti_id !== null && ATTEMPT_ENDS.has(to)) {
      tiIds.add(e.ti_id);
      runIds.add(e.run_id);
    } else if (e.kind === 'run.state' && RUN_ENDS.has(to)) {
      endedRunIds.add(e.run_id);
      runIds.add(e.run_id);
    }
  }
  return { runIds: [...runIds], tiIds: [...tiIds], endedRunIds: [...endedRunIds] };
}

/**
 * The spans of the attempts and runs that ended in the events after `fromSeq`, from the state
 * histories that lead to those ends (`traceSources`). An attempt runs from its claim (queued) to
 * its end, with its start as a span event; a run from its trigger to its first end. A run
 * re-opened by a clear and ended again gets a child span for that stretch.
 */
export function spansOfEvents(
  fromSeq: bigint,
  runs: readonly TracedRun[],
  events: readonly StateEvent[],
): SpanRecord[] {
  const runById = new Map(runs.map((r) => [r.id, r]));
  const spans: SpanRecord[] = [];
  const attempts = new Map<string, OpenAttempt>();
  const runEnds = new Map<string, { ended: boolean; reopenedAt: Date | null }>();
  for (const e of events) {
    const run = runById.get(e.run_id);
    const trace = run?.traceparent ? parseTraceparent(run.traceparent) : null;
    const inBatch = BigInt(e.seq) > fromSeq;
    const to = String(e.payload.to);
    if (e.kind === 'ti.state' && e.ti_id !== null) {
      const tryNumber = Number(e.payload.try);
      if (to === 'queued') {
        const agentId = typeof e.payload.agent_id === 'string' ? e.payload.agent_id : null;
        const again = attempts.get(e.ti_id);
        if (again?.tryNumber === tryNumber) again.agentId = agentId;
        else attempts.set(e.ti_id, { tryNumber, queuedAt: e.at, startedAt: null, agentId });
      } else if (to === 'running') {
        const a = attempts.get(e.ti_id);
        if (a) a.startedAt = e.at;
      } else if (ATTEMPT_ENDS.has(to)) {
        const a = attempts.get(e.ti_id);
        attempts.delete(e.ti_id);
        if (!a || !inBatch || !run || !trace) continue;
        spans.push(attemptSpan(run, trace.spanId, e, a, to));
      }
    } else if (e.kind === 'run.state') {
      const r = runEnds.get(e.run_id) ?? { ended: false, reopenedAt: null };
      runEnds.set(e.run_id, r);
      if (to === 'running' && r.ended) r.reopenedAt = e.at;
      if (!RUN_ENDS.has(to)) continue;
      if (inBatch && run && trace)
        spans.push(r.ended ? rerunSpan(run, e, to, r.reopenedAt) : runSpan(run, trace, e, to));
      r.ended = true;
    }
  }
  return spans;
}

function runAttributes(run: TracedRun) {
  return {
    'leoflow.dag_id': run.dag_id,
    'leoflow.run_id': run.id,
    'leoflow.run_key': run.run_key,
    'leoflow.run_type': run.run_type,
  };
}

function runSpan(run: TracedRun, trace: TraceParent, end: StateEvent, state: string): SpanRecord {
  return {
    name: `run ${run.dag_id}`,
    // A caller's span is its parent; else it is the trace's root.
    parent: run.trace_parent_span
      ? { traceparent: formatTraceparent({ ...trace, spanId: run.trace_parent_span }), tracestate: run.tracestate }
      : null,
    traceId: trace.traceId,
    spanId: trace.spanId,
    kind: SpanKind.SERVER,
    start: run.created_at,
    end: end.at,
    attributes: { ...runAttributes(run), 'leoflow.state': state },
    error: state === 'success' ? null : `run ${state}`,
  };
}

function rerunSpan(run: TracedRun, end: StateEvent, state: string, reopenedAt: Date | null): SpanRecord {
  return {
    name: `run ${run.dag_id} (cleared)`,
    parent: { traceparent: run.traceparent!, tracestate: run.tracestate },
    start: reopenedAt ?? end.at,
    end: end.at,
    attributes: { ...runAttributes(run), 'leoflow.state': state },
    error: state === 'success' ? null : `run ${state}`,
  };
}

function attemptSpan(run: TracedRun, runSpanId: string, end: StateEvent, a: OpenAttempt, state: string): SpanRecord {
  const p = end.payload;
  const error = typeof p.error === 'string' ? p.error : null;
  return {
    name: `attempt ${String(p.task_id)}`,
    parent: { traceparent: run.traceparent!, tracestate: run.tracestate },
    spanId: attemptSpanId(runSpanId, end.ti_id!, a.tryNumber),
    kind: SpanKind.INTERNAL,
    start: a.queuedAt,
    end: end.at,
    attributes: {
      ...runAttributes(run),
      'leoflow.task_id': String(p.task_id),
      'leoflow.ti_id': end.ti_id!,
      'leoflow.try_number': a.tryNumber,
      'leoflow.state': state,
      ...(a.agentId ? { 'leoflow.agent_id': a.agentId } : {}),
      ...(typeof p.exit_code === 'number' ? { 'leoflow.exit_code': p.exit_code } : {}),
      ...(typeof p.reason === 'string' ? { 'leoflow.reason': p.reason } : {}),
    },
    events: a.startedAt ? [{ name: 'started', at: a.startedAt }] : [],
    error: state === 'failed' || state === 'up_for_retry' ? (error ?? `attempt ${state}`) : null,
  };
}
