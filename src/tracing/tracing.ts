import {
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  createTraceState,
  trace,
  type Attributes,
  type Context,
} from '@opentelemetry/api';
import { setGlobalErrorHandler } from '@opentelemetry/core';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { BasicTracerProvider, BatchSpanProcessor } from '@opentelemetry/sdk-trace-base';
import type { Logger } from 'pino';
import { parseTraceparent, type TraceContext } from '../core/trace-context.js';
import { DurableIds } from './durable-ids.js';

/** A span recorded once it is over: Leoflow's spans outlive processes, so none is held open. */
export interface SpanRecord {
  name: string;
  /** The parent span's context; null for a root span (then `traceId` names the trace). */
  parent: TraceContext | null;
  traceId?: string;
  /** The span's own id when it is fixed beforehand (a run's, an attempt's); else random. */
  spanId?: string;
  kind?: SpanKind;
  start: Date;
  end: Date;
  attributes: Attributes;
  events?: { name: string; at: Date; attributes?: Attributes }[];
  /** Set when the work failed: the span's status is ERROR with this message. */
  error?: string | null;
}

/** Where Leoflow's spans go: one OTLP/HTTP exporter a replica, batched. */
export interface Tracing {
  record(span: SpanRecord): void;
  /** Sends what is batched and stops. */
  close(): Promise<void>;
}

/** How often export failures are logged at most: a collector that is down should not flood the log. */
const ERROR_LOG_MS = 60_000;

/**
 * The OpenTelemetry SDK set up for one replica: resource `service.name=leoflow` with the replica
 * id, a batch processor and the OTLP/HTTP (protobuf) exporter to `endpoint`. Only built when
 * `--otlp-endpoint` is set; off, nothing of this is loaded on any path.
 */
export function createTracing(o: { endpoint: string; replicaId: string; edition: string; logger: Logger }): Tracing {
  const ids = new DurableIds();
  const provider = new BasicTracerProvider({
    resource: resourceFromAttributes({
      'service.name': 'leoflow',
      'service.instance.id': o.replicaId,
      'leoflow.edition': o.edition,
    }),
    idGenerator: ids,
    spanProcessors: [
      new BatchSpanProcessor(new OTLPTraceExporter({ url: o.endpoint }), {
        maxQueueSize: 20_000,
        maxExportBatchSize: 512,
        scheduledDelayMillis: 1_000,
      }),
    ],
  });
  let lastLogged = 0;
  setGlobalErrorHandler((err) => {
    if (Date.now() - lastLogged < ERROR_LOG_MS) return;
    lastLogged = Date.now();
    o.logger.warn(
      { err: err instanceof Error ? err.message : String(err), endpoint: o.endpoint },
      'could not export spans (logged once a minute at most)',
    );
  });
  const tracer = provider.getTracer('leoflow');

  return {
    record(s) {
      const parent = s.parent ? contextOf(s.parent) : ROOT_CONTEXT;
      if (parent === null) return;
      const span = ids.withIds({ traceId: s.traceId, spanId: s.spanId }, () =>
        tracer.startSpan(
          s.name,
          { kind: s.kind ?? SpanKind.INTERNAL, startTime: s.start, attributes: s.attributes },
          parent,
        ),
      );
      for (const e of s.events ?? []) span.addEvent(e.name, e.attributes ?? {}, e.at);
      if (s.error) span.setStatus({ code: SpanStatusCode.ERROR, message: s.error });
      span.end(s.end < s.start ? s.start : s.end);
    },
    close: () => provider.shutdown(),
  };
}

/** A remote parent's context for the SDK, or null when its traceparent does not parse. */
function contextOf(p: TraceContext): Context | null {
  const tp = parseTraceparent(p.traceparent);
  if (!tp) return null;
  return trace.setSpanContext(ROOT_CONTEXT, {
    traceId: tp.traceId,
    spanId: tp.spanId,
    traceFlags: tp.flags,
    isRemote: true,
    ...(p.tracestate ? { traceState: createTraceState(p.tracestate) } : {}),
  });
}
