import { RandomIdGenerator, type IdGenerator } from '@opentelemetry/sdk-trace-base';

/**
 * The SDK's id generator, with one seam: a span whose ids were fixed before it was recorded (a
 * run's span id is stored with the run; an attempt's is derived from it) is started with those
 * ids. The SDK takes ids only from its generator, so they are handed over here, synchronously,
 * for the one `startSpan` call inside `withIds`; any other span gets random ids.
 */
export class DurableIds implements IdGenerator {
  #next: { traceId?: string; spanId?: string } | null = null;
  readonly #random = new RandomIdGenerator();

  /** Runs `start`, whose one span takes these ids. `start` must not wait (no other span may start meanwhile). */
  withIds<T>(ids: { traceId?: string; spanId?: string }, start: () => T): T {
    this.#next = ids;
    try {
      return start();
    } finally {
      this.#next = null;
    }
  }

  generateTraceId(): string {
    return this.#next?.traceId ?? this.#random.generateTraceId();
  }

  generateSpanId(): string {
    return this.#next?.spanId ?? this.#random.generateSpanId();
  }
}
