import type { Logger } from 'pino';
import type { Sql } from '../db/sql.js';
import type { EventFeed } from '../feed/event-feed.js';
import { dispatchSpan, podCreateSpan } from './executor-spans.js';
import { createSpanRecorder, type SpanRecorder } from './span-recorder.js';
import { createTracing, type SpanRecord } from './tracing.js';

/** What a replica does for tracing, when `--otlp-endpoint` is set. */
export interface ReplicaTracing {
  dispatched(d: Parameters<typeof dispatchSpan>[0]): void;
  podCreated(c: Parameters<typeof podCreateSpan>[0]): void;
  /** The leader's recorder of run and attempt spans, reading this replica's event feed. */
  recorder(sql: Sql, feed: EventFeed): SpanRecorder;
  /** Sends the spans batched and stops. */
  close(): Promise<void>;
}

/**
 * Tracing for one replica. The control plane imports this module only when tracing is on, so
 * with it off no OpenTelemetry code is even loaded.
 */
export function startReplicaTracing(o: {
  endpoint: string;
  replicaId: string;
  edition: string;
  logger: Logger;
}): ReplicaTracing {
  const tracing = createTracing(o);
  const record = (s: SpanRecord | null) => s && tracing.record(s);
  return {
    dispatched: (d) => record(dispatchSpan(d)),
    podCreated: (c) => record(podCreateSpan(c)),
    recorder: (sql, feed) => createSpanRecorder({ sql, feed, tracing, logger: o.logger }),
    close: () => tracing.close(),
  };
}
