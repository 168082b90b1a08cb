import { create } from '@bufbuild/protobuf';
import type { Logger } from 'pino';
import type { AttemptResult, LogStream } from '../core/attempt.js';
import { ConnectRequestSchema, type ConnectRequest } from '../gen/leoflow/v1/agent_pb.js';
import { finishedOf } from './attempt-messages.js';
import type { HeldAttempt, HeldAttempts } from './held-attempts.js';
import type { LogBatch, LogBatcher } from './log-batcher.js';
import type { Outbox } from './outbox.js';

export interface AttemptReportsOptions {
  outbox: Outbox<ConnectRequest>;
  held: HeldAttempts;
  batcher: LogBatcher;
  logger: Logger;
  /** How long output lines wait to be batched. */
  logFlushMs: number;
  /** Something was queued in the outbox: write it if a stream is up. */
  wake(): void;
  /** The set of held attempts changed. */
  changed(): void;
}

/**
 * What an agent says about its attempts, queued in the outbox: Started, Log batches (never ahead
 * of their attempt's Started) and Finished.
 */
export class AttemptReports {
  readonly #o: AttemptReportsOptions;
  #flushTimer: NodeJS.Timeout | null = null;

  constructor(o: AttemptReportsOptions) {
    this.#o = o;
  }

  started(held: HeldAttempt, pid: number | null): void {
    held.pid = pid;
    this.#o.outbox.push({
      key: held.key,
      kind: 'started',
      message: create(ConnectRequestSchema, {
        msg: { case: 'started', value: { attempt: held.ref, pid: pid ?? 0 } },
      }),
      lines: 0,
    });
    this.#o.batcher.open(held.key);
    this.#o.logger.info({ tiId: held.attempt.tiId, try: held.attempt.tryNumber, pid }, 'attempt started');
    this.#o.wake();
  }

  line(held: HeldAttempt, stream: LogStream, line: string): void {
    this.#o.batcher.push(held.key, stream, line);
    this.#scheduleFlush();
  }

  /** Its lines first, then its Finished; once only. An end the agent's own shutdown caused is FAILED. */
  finished(held: HeldAttempt, result: AttemptResult): void {
    if (held.phase === 'ended') return;
    held.phase = 'ended';
    const final =
      held.stop?.kind === 'shutdown' && result.outcome === 'cancelled'
        ? { ...result, outcome: 'failed' as const, error: held.stop.reason }
        : result;
    this.#o.batcher.open(held.key);
    this.#moveLogs(this.#o.batcher.takeKey(held.key, true));
    this.#o.outbox.push({
      key: held.key,
      kind: 'finished',
      message: create(ConnectRequestSchema, { msg: { case: 'finished', value: finishedOf(held.attempt, final) } }),
      lines: 0,
    });
    const { tiId, tryNumber } = held.attempt;
    this.#o.logger.info(
      {
        tiId,
        try: tryNumber,
        outcome: final.outcome,
        exitCode: final.exitCode,
        signal: final.signal,
        error: final.error,
      },
      'attempt finished',
    );
    this.#o.wake();
    this.#o.changed();
  }

  /** Moves the buffered lines of open attempts into the outbox. */
  flushLogs(): void {
    this.#moveLogs(this.#o.batcher.take());
  }

  stopFlushing(): void {
    if (this.#flushTimer) clearTimeout(this.#flushTimer);
    this.#flushTimer = null;
  }

  #moveLogs(batches: LogBatch[]): void {
    for (const { key, entries } of batches) {
      const held = this.#o.held.get(key);
      if (!held) {
        this.#o.batcher.release(entries.length);
        continue;
      }
      const message = create(ConnectRequestSchema, { msg: { case: 'log', value: { attempt: held.ref, entries } } });
      this.#o.outbox.push({
        key,
        kind: 'log',
        message,
        lines: entries.length,
        lastSeq: entries[entries.length - 1]!.seq,
      });
    }
  }

  #scheduleFlush(): void {
    if (this.#flushTimer) return;
    this.#flushTimer = setTimeout(() => {
      this.#flushTimer = null;
      this.flushLogs();
      this.#o.wake();
    }, this.#o.logFlushMs);
  }
}
