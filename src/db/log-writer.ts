import type { Logger } from 'pino';
import type { LogStream } from '../core/attempt.js';
import { isConnectionError } from './is-connection-error.js';
import { retryOnConnectionError } from './retry-on-connection-error.js';
import { LIMITS } from '../core/limits.js';
import type { Sql } from './sql.js';

interface Pending {
  tiId: string;
  tryNumber: number;
  attemptToken: string;
  seq: number;
  stream: LogStream;
  line: string;
  at: Date;
}

export interface LogWriter {
  /**
   * Buffers one line; it is written with others in one multi-row INSERT. `seq` is given by an
   * agent that numbers its own lines (a batch resent after a reconnect is then not stored
   * twice); without it the writer numbers them in arrival order.
   */
  write(tiId: string, tryNumber: number, attemptToken: string, stream: LogStream, line: string, seq?: number): void;
  /** Writes everything buffered so far. */
  flush(): Promise<void>;
  /**
   * Settles once every line buffered so far has been written (in the next flush, not forcing
   * one): what an agent's LogAck waits for. Rejects when they could not be written.
   */
  written(): Promise<void>;
  /** Whether a write is in flight (`sendOn` must then wait for `flush()` first). */
  readonly busy: boolean;
  /**
   * Writes everything buffered so far on `on`, the statement sent before this returns, so it goes
   * ahead of whatever is sent on `on` next (the report batcher sends an attempt's lines ahead of
   * its end, in the same round trip). Only when not `busy`. Resolves once written, retried through
   * the pool after a lost connection; never rejects (a failure is logged, as for every flush).
   */
  sendOn(on: Sql): Promise<void>;
  /** Numbers this attempt's next lines after `seq` (for an attempt re-attached after a restart). */
  continueAfter(tiId: string, tryNumber: number, seq: number): void;
  /** Forgets the sequence counter of an attempt that has ended. */
  forget(tiId: string, tryNumber: number): void;
  close(): Promise<void>;
}

export interface LogWriterOptions {
  flushMs: number;
  maxBatch: number;
  onRejected?: (lines: number) => void;
  giveUp?: AbortSignal;
  /** Lines stored of one attempt (LIMITS.attemptLogLines); a test may set fewer. */
  maxLinesPerAttempt?: number;
}

/**
 * Fenced like every report: lines of a superseded attempt (a zombie) are not stored. The fence
 * holds each task instance of the batch (key share, once each) until the lines commit: `db clean`
 * deleting one waits for them and then deletes them too, or has deleted it first and then none is
 * stored, so a line written as its task instance is removed is never left behind. In id order, as
 * `db clean` locks them, so neither waits on the other in a cycle.
 */
const insert = (on: Sql, batch: Pending[]) => on`
      with t as (
        select id, try_number, attempt_token from task_instances
        where id = any(${[...new Set(batch.map((p) => p.tiId))]}::bigint[]) order by id for key share)
      insert into task_logs (ti_id, try_number, seq, stream, line, at)
      select u.ti_id, u.try_number, u.seq, u.stream, u.line, u.at
      from unnest(${batch.map((p) => p.tiId)}::bigint[], ${batch.map((p) => p.tryNumber)}::int[],
                  ${batch.map((p) => p.seq)}::int[], ${batch.map((p) => p.stream)}::text[],
                  ${batch.map((p) => p.line)}::text[], ${batch.map((p) => p.at.toISOString())}::timestamptz[],
                  ${batch.map((p) => p.attemptToken)}::uuid[])
           as u(ti_id, try_number, seq, stream, line, at, token)
      join t on t.id = u.ti_id and t.try_number = u.try_number and t.attempt_token = u.token
      on conflict do nothing`;

/**
 * Task log lines, batched: a chatty task costs one INSERT per flush interval, not one per line.
 * Sequence numbers are assigned here, per attempt, in the order lines arrive.
 */
export class BatchedLogWriter implements LogWriter {
  readonly #sql: Sql;
  readonly #logger: Logger;
  readonly #opts: LogWriterOptions;
  readonly #maxLines: number;
  #buffer: Pending[] = [];
  readonly #seqs = new Map<string, number>();
  #timer: NodeJS.Timeout | null = null;
  #inFlight: Promise<void> = Promise.resolve();
  /** Whether the batch taken last was written; and the waiters for the lines still buffered. */
  #lastBatch: Promise<void> = Promise.resolve();
  #buffered: { resolve: (p: Promise<void>) => void } | null = null;
  #bufferedPromise: Promise<void> | null = null;
  /** Batches taken from the buffer and not yet written. */
  #busy = 0;
  /** Made once: the timed flush. */
  readonly #flushLater = () => void this.flush();

  constructor(sql: Sql, logger: Logger, opts: LogWriterOptions) {
    this.#sql = sql;
    this.#logger = logger;
    this.#opts = opts;
    this.#maxLines = opts.maxLinesPerAttempt ?? LIMITS.attemptLogLines;
  }

  get busy(): boolean {
    return this.#busy > 0;
  }

  write(tiId: string, tryNumber: number, attemptToken: string, stream: LogStream, line: string, given?: number): void {
    const key = `${tiId}/${tryNumber}`;
    const seq = given ?? (this.#seqs.get(key) ?? 0) + 1;
    this.#seqs.set(key, Math.max(seq, this.#seqs.get(key) ?? 0));
    // One attempt's output is bounded (a task printing without end would fill the database): the
    // line past the limit says so, in its place, and later ones are dropped. By seq, so a line sent
    // again after a reconnect is judged the same.
    const maxLines = this.#maxLines;
    if (seq > maxLines + 1) return;
    const stored =
      seq > maxLines
        ? {
            stream: 'system' as const,
            line: `[output cut: an attempt's log holds at most ${maxLines} lines; the rest is not stored]`,
          }
        : { stream, line: line.includes('\0') ? line.replaceAll('\0', '\uFFFD') : line };
    // NUL bytes cannot be stored in a text column.
    this.#buffer.push({ tiId, tryNumber, attemptToken, seq, ...stored, at: new Date() });
    if (this.#buffer.length >= this.#opts.maxBatch) void this.flush();
    else this.#timer ??= setTimeout(this.#flushLater, this.#opts.flushMs);
  }

  flush(): Promise<void> {
    this.#clearTimer();
    if (this.#buffer.length === 0) return this.#inFlight;
    const batch = this.#takeBuffer();
    // Chained so lines of one attempt are written in order even across flushes.
    this.#taken(this.#inFlight.then(() => this.#settle(batch, () => insert(this.#sql, batch))));
    return this.#inFlight;
  }

  written(): Promise<void> {
    if (this.#buffer.length === 0) return this.#lastBatch;
    this.#bufferedPromise ??= new Promise<void>((resolve) => (this.#buffered = { resolve }));
    return this.#bufferedPromise;
  }

  sendOn(on: Sql): Promise<void> {
    if (this.#busy > 0) throw new Error('log writer: sendOn while a write is in flight');
    this.#clearTimer();
    if (this.#buffer.length === 0) return Promise.resolve();
    const batch = this.#takeBuffer();
    const sent = insert(on, batch).execute();
    this.#taken(this.#settle(batch, () => sent));
    return this.#inFlight;
  }

  continueAfter(tiId: string, tryNumber: number, seq: number): void {
    const key = `${tiId}/${tryNumber}`;
    this.#seqs.set(key, Math.max(seq, this.#seqs.get(key) ?? 0));
  }

  forget(tiId: string, tryNumber: number): void {
    this.#seqs.delete(`${tiId}/${tryNumber}`);
  }

  async close(): Promise<void> {
    await this.flush();
  }

  #clearTimer(): void {
    if (this.#timer) {
      clearTimeout(this.#timer);
      this.#timer = null;
    }
  }

  /** The buffered lines, as one batch counted in `busy` until settled. */
  #takeBuffer(): Pending[] {
    const batch = this.#buffer;
    this.#buffer = [];
    this.#busy++;
    return batch;
  }

  /** A batch was taken from the buffer: `done` says whether it was written. */
  #taken(done: Promise<boolean>): void {
    this.#inFlight = done.then(() => {});
    this.#lastBatch = done.then((ok) => {
      if (!ok) throw new Error('task log lines could not be written');
    });
    this.#lastBatch.catch(() => {});
    this.#buffered?.resolve(this.#lastBatch);
    this.#buffered = null;
    this.#bufferedPromise = null;
  }

  /**
   * Settles one batch taken from the buffer (counted in `busy`): `first` is its first try, on
   * whatever connection; a lost connection is retried through the pool.
   */
  async #settle(batch: Pending[], first: () => Promise<{ count: number }>): Promise<boolean> {
    try {
      let written: { count: number };
      try {
        written = await first();
      } catch (err) {
        if (!isConnectionError(err)) throw err;
        written = await retryOnConnectionError(() => insert(this.#sql, batch), {
          maxMs: 60_000,
          giveUp: this.#opts.giveUp,
        });
      }
      if (written.count < batch.length) {
        this.#opts.onRejected?.(batch.length - written.count);
        this.#logger.warn({ lines: batch.length - written.count }, 'log lines of a superseded attempt refused');
      }
      return true;
    } catch (err) {
      this.#logger.error({ err, lines: batch.length }, 'failed to write task log lines');
      return false;
    } finally {
      this.#busy--;
    }
  }
}

/** The task log writer of this replica (see BatchedLogWriter). */
export function createLogWriter(sql: Sql, logger: Logger, opts: LogWriterOptions): LogWriter {
  return new BatchedLogWriter(sql, logger, opts);
}
