/**
 * Output lines of the attempts an agent runs, numbered and batched for the stream.
 *
 * Each attempt's lines get seq 1, 2, 3, … with no gaps (the control plane stores a line once per
 * seq, so a batch resent after a reconnect is harmless). Lines wait here until their attempt is
 * open — its Started or Finished is queued — so a Log never overtakes the Started of its attempt.
 *
 * Memory is bounded: lines buffered here plus lines handed out but not yet confirmed by the
 * control plane count against `maxPendingLines`. Past it (a long disconnection of a chatty task)
 * new lines are dropped and counted, and one `system` line saying how many were lost takes the
 * next seq once there is room again, so the numbering stays gap-free and the loss is visible.
 */

import type { LogStream } from '../core/attempt.js';

export interface NumberedLine {
  seq: number;
  stream: LogStream;
  line: string;
}

export interface LogBatch {
  key: string;
  entries: NumberedLine[];
}

export interface LogBatcherOptions {
  /** At most this many lines per batch. Default 500. */
  maxBatchLines?: number;
  /** At most about this many bytes of text per batch (one line may exceed it). Default 256 KiB. */
  maxBatchBytes?: number;
  /** Lines buffered or unconfirmed, over all attempts, before new ones are dropped. Default 100_000. */
  maxPendingLines?: number;
}

interface AttemptLog {
  nextSeq: number;
  open: boolean;
  pending: NumberedLine[];
  /** Lines dropped since the last one kept, still to be reported by a marker line. */
  dropped: number;
}

export class LogBatcher {
  readonly #maxBatchLines: number;
  readonly #maxBatchBytes: number;
  readonly #maxPendingLines: number;
  readonly #logs = new Map<string, AttemptLog>();
  /** Lines buffered here plus lines taken and not yet released. */
  #outstanding = 0;

  constructor(opts: LogBatcherOptions = {}) {
    this.#maxBatchLines = opts.maxBatchLines ?? 500;
    this.#maxBatchBytes = opts.maxBatchBytes ?? 256 * 1024;
    this.#maxPendingLines = opts.maxPendingLines ?? 100_000;
  }

  /** Lines buffered or handed out and not yet released. */
  get outstanding(): number {
    return this.#outstanding;
  }

  /** Numbers one line of `key` and buffers it (or counts it as dropped when over budget). */
  push(key: string, stream: LogStream, line: string): void {
    const log = this.#log(key);
    if (this.#outstanding >= this.#maxPendingLines) {
      log.dropped++;
      return;
    }
    this.#flushMarker(log, false);
    this.#add(log, stream, line);
  }

  /** Numbers the next lines of `key` after `seq` (the control plane holds up to it already). */
  continueAfter(key: string, seq: number): void {
    const log = this.#log(key);
    log.nextSeq = Math.max(log.nextSeq, seq + 1);
  }

  /** From now on the lines of `key` can be taken. */
  open(key: string): void {
    this.#log(key).open = true;
  }

  /** True when some open attempt has lines to take. */
  hasPending(): boolean {
    for (const log of this.#logs.values()) if (log.open && (log.pending.length > 0 || log.dropped > 0)) return true;
    return false;
  }

  /** Takes the buffered lines of every open attempt, as batches. */
  take(): LogBatch[] {
    const batches: LogBatch[] = [];
    for (const key of this.#logs.keys()) batches.push(...this.takeKey(key));
    return batches;
  }

  /**
   * Takes the buffered lines of one attempt (if open). With `final`, its loss marker is written
   * even over budget: nothing follows, so this is the last chance to say lines were lost.
   */
  takeKey(key: string, final = false): LogBatch[] {
    const log = this.#logs.get(key);
    if (!log || !log.open) return [];
    this.#flushMarker(log, final);
    const batches: LogBatch[] = [];
    let entries: NumberedLine[] = [];
    let bytes = 0;
    for (const entry of log.pending) {
      const size = Buffer.byteLength(entry.line);
      if (entries.length > 0 && (entries.length >= this.#maxBatchLines || bytes + size > this.#maxBatchBytes)) {
        batches.push({ key, entries });
        entries = [];
        bytes = 0;
      }
      entries.push(entry);
      bytes += size;
    }
    if (entries.length > 0) batches.push({ key, entries });
    log.pending = [];
    return batches;
  }

  /** `lines` handed out by take() were confirmed or discarded: they no longer count. */
  release(lines: number): void {
    this.#outstanding = Math.max(0, this.#outstanding - lines);
  }

  /** Forgets an attempt: its buffered lines are discarded (and released). */
  forget(key: string): void {
    const log = this.#logs.get(key);
    if (!log) return;
    this.release(log.pending.length);
    this.#logs.delete(key);
  }

  #log(key: string): AttemptLog {
    let log = this.#logs.get(key);
    if (!log) {
      log = { nextSeq: 1, open: false, pending: [], dropped: 0 };
      this.#logs.set(key, log);
    }
    return log;
  }

  #add(log: AttemptLog, stream: LogStream, line: string): void {
    log.pending.push({ seq: log.nextSeq++, stream, line });
    this.#outstanding++;
  }

  #flushMarker(log: AttemptLog, force: boolean): void {
    if (log.dropped === 0 || (!force && this.#outstanding >= this.#maxPendingLines)) return;
    const n = log.dropped;
    log.dropped = 0;
    this.#add(
      log,
      'system',
      `${n} output line${n === 1 ? '' : 's'} dropped: ` +
        `more than ${this.#maxPendingLines} lines were waiting for the control plane`,
    );
  }
}
