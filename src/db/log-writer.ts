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

/**
 * Task log lines, batched: a chatty task costs one INSERT per flush interval, not one per line.
 * Sequence numbers are assigned here, per attempt, in the order lines arrive.
 */
export function createLogWriter(
  sql: Sql,
  logger: Logger,
  opts: {
    flushMs: number;
    maxBatch: number;
    onRejected?: (lines: number) => void;
    giveUp?: AbortSignal;
    /** Lines stored of one attempt (LIMITS.attemptLogLines); a test may set fewer. */
    maxLinesPerAttempt?: number;
  },
): LogWriter {
  const maxLines = opts.maxLinesPerAttempt ?? LIMITS.attemptLogLines;
  let buffer: Pending[] = [];
  const seqs = new Map<string, number>();
  let timer: NodeJS.Timeout | null = null;
  let inFlight: Promise<void> = Promise.resolve();
  /** Whether the batch taken last was written; and the waiters for the lines still buffered. */
  let lastBatch: Promise<void> = Promise.resolve();
  let buffered: { resolve: (p: Promise<void>) => void } | null = null;
  let bufferedPromise: Promise<void> | null = null;

  /** Batches taken from the buffer and not yet written. */
  let busy = 0;
  // Fenced like every report: lines of a superseded attempt (a zombie) are not stored. The fence
  // holds each task instance of the batch (key share, once each) until the lines commit: `db
  // clean` deleting one waits for them and then deletes them too, or has deleted it first and then
  // none is stored, so a line written as its task instance is removed is never left behind. In id
  // order, as `db clean` locks them, so neither waits on the other in a cycle.
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

  /** Settles one batch taken from the buffer (counted in `busy`): `first` is its first try, on
   *  whatever connection; a lost connection is retried through the pool. */
  const settle = async (batch: Pending[], first: () => Promise<{ count: number }>): Promise<boolean> => {
    try {
      let written: { count: number };
      try {
        written = await first();
      } catch (err) {
        if (!isConnectionError(err)) throw err;
        written = await retryOnConnectionError(() => insert(sql, batch), { maxMs: 60_000, giveUp: opts.giveUp });
      }
      if (written.count < batch.length) {
        opts.onRejected?.(batch.length - written.count);
        logger.warn({ lines: batch.length - written.count }, 'log lines of a superseded attempt refused');
      }
      return true;
    } catch (err) {
      logger.error({ err, lines: batch.length }, 'failed to write task log lines');
      return false;
    } finally {
      busy--;
    }
  };

  const flush = (): Promise<void> => {
    if (timer) {
      clearTimeout(timer);
      timer = null;
    }
    if (buffer.length === 0) return inFlight;
    const batch = buffer;
    buffer = [];
    busy++;
    // Chained so lines of one attempt are written in order even across flushes.
    taken(inFlight.then(() => settle(batch, () => insert(sql, batch))));
    return inFlight;
  };

  /** A batch was taken from the buffer: `done` says whether it was written. */
  const taken = (done: Promise<boolean>) => {
    inFlight = done.then(() => {});
    lastBatch = done.then((ok) => {
      if (!ok) throw new Error('task log lines could not be written');
    });
    lastBatch.catch(() => {});
    buffered?.resolve(lastBatch);
    buffered = null;
    bufferedPromise = null;
  };

  return {
    write(tiId, tryNumber, attemptToken, stream, line, given) {
      const key = `${tiId}/${tryNumber}`;
      const seq = given ?? (seqs.get(key) ?? 0) + 1;
      seqs.set(key, Math.max(seq, seqs.get(key) ?? 0));
      // One attempt's output is bounded (a task printing without end would fill the database):
      // the line past the limit says so, in its place, and later ones are dropped. By seq, so a
      // line sent again after a reconnect is judged the same.
      if (seq > maxLines + 1) return;
      const stored =
        seq > maxLines
          ? {
              stream: 'system' as const,
              line: `[output cut: an attempt's log holds at most ${maxLines} lines; the rest is not stored]`,
            }
          : { stream, line: line.includes('\0') ? line.replaceAll('\0', '\uFFFD') : line };
      // NUL bytes cannot be stored in a text column.
      buffer.push({ tiId, tryNumber, attemptToken, seq, ...stored, at: new Date() });
      if (buffer.length >= opts.maxBatch) void flush();
      else timer ??= setTimeout(() => void flush(), opts.flushMs);
    },
    flush,
    written() {
      if (buffer.length === 0) return lastBatch;
      bufferedPromise ??= new Promise<void>((resolve) => (buffered = { resolve }));
      return bufferedPromise;
    },
    get busy() {
      return busy > 0;
    },
    sendOn(on) {
      if (busy > 0) throw new Error('log writer: sendOn while a write is in flight');
      if (timer) {
        clearTimeout(timer);
        timer = null;
      }
      if (buffer.length === 0) return Promise.resolve();
      const batch = buffer;
      buffer = [];
      busy++;
      const sent = insert(on, batch).execute();
      taken(settle(batch, () => sent));
      return inFlight;
    },
    continueAfter(tiId, tryNumber, seq) {
      const key = `${tiId}/${tryNumber}`;
      seqs.set(key, Math.max(seq, seqs.get(key) ?? 0));
    },
    forget(tiId, tryNumber) {
      seqs.delete(`${tiId}/${tryNumber}`);
    },
    async close() {
      await flush();
    },
  };
}
