import { closeSync, openSync, readSync, watch, type FSWatcher } from 'node:fs';
import { LineSplitter } from './line-splitter.js';

/** Read per turn of the event loop, so a chatty task cannot hold the thread. */
const CHUNK_BYTES = 256 * 1024;
/** When the file cannot be watched (no inotify left), it is read this often. */
const POLL_MS = 250;
/** A file is followed (watched) once its task has run this long: a busy executor's tasks are
 *  mostly over by then, and their output is read at their end without a watch set up and torn
 *  down (inotify's add and remove were ~5 % of an agent's thread running `true` tasks). */
const FOLLOW_AFTER_MS = 50;

/** Reads are synchronous and the line splitter copies what it keeps, so one buffer serves all. */
let shared: Buffer | null = null;

/**
 * Follows one output file of a task (its shim appends to it) and hands its lines on as they
 * come. A file, not a pipe, because the task's output must survive its supervisor's parent: a
 * restarted server or agent tails the same file from where the database says its log stopped
 * (`skipLines`), so the log is whole and no line is stored twice.
 */
export class OutputTail {
  readonly #fd: number;
  readonly #onLine: (line: string) => void;
  readonly #splitter = new LineSplitter();
  readonly #buffer = (shared ??= Buffer.allocUnsafe(CHUNK_BYTES));
  #position = 0;
  #skip: number;
  #watcher: FSWatcher | null = null;
  #poll: NodeJS.Timeout | null = null;
  #follow: NodeJS.Timeout | null;
  #queued = false;
  #closed = false;

  constructor(file: string, onLine: (line: string) => void, opts: { skipLines?: number } = {}) {
    this.#fd = openSync(file, 'r');
    this.#onLine = onLine;
    this.#skip = opts.skipLines ?? 0;
    this.#follow = setTimeout(() => this.#startFollowing(file), FOLLOW_AFTER_MS);
  }

  #startFollowing(file: string): void {
    this.#follow = null;
    try {
      this.#watcher = watch(file, { persistent: false }, () => this.#soon());
      this.#watcher.on('error', () => this.#pollInstead());
    } catch {
      this.#pollInstead();
    }
    // What was written before the watch began is read now.
    this.#soon();
  }

  /** Reads to the end of the file now, then stops following it; a last unfinished line counts. */
  finish(): void {
    if (this.#closed) return;
    this.#read(Infinity);
    for (const line of this.#splitter.end()) this.#emit(line);
    this.close();
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    if (this.#follow) clearTimeout(this.#follow);
    this.#watcher?.close();
    if (this.#poll) clearInterval(this.#poll);
    closeSync(this.#fd);
  }

  #pollInstead(): void {
    this.#watcher?.close();
    this.#watcher = null;
    if (!this.#closed && !this.#poll) this.#poll = setInterval(() => this.#soon(), POLL_MS).unref();
  }

  /** Coalesces a burst of change events into one read. */
  #soon(): void {
    if (this.#queued || this.#closed) return;
    this.#queued = true;
    setImmediate(() => {
      this.#queued = false;
      if (!this.#closed && this.#read(CHUNK_BYTES) === CHUNK_BYTES) this.#soon();
    });
  }

  /** Reads up to `limit` bytes from where the last read stopped; returns how many it read. */
  #read(limit: number): number {
    let total = 0;
    while (total < limit) {
      const n = readSync(this.#fd, this.#buffer, 0, CHUNK_BYTES, this.#position);
      if (n === 0) break;
      this.#position += n;
      total += n;
      for (const line of this.#splitter.push(this.#buffer.subarray(0, n))) this.#emit(line);
    }
    return total;
  }

  #emit(line: string): void {
    if (this.#skip > 0) this.#skip--;
    else this.#onLine(line);
  }
}
