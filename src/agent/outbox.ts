/**
 * Reports waiting for the stream, in the order they were made, kept until the control plane has
 * them.
 *
 * "Has them" differs by kind. Started has no answer of its own, so it is confirmed by the
 * KeepaliveAck of a Keepalive written after it: the control plane handles a stream's messages in
 * order, so its answer to Keepalive n means everything written before Keepalive n was taken. Log
 * is confirmed by a LogAck covering its last line (the lines are stored, not only taken).
 * Finished is kept until its own FinishedAck. When a stream is lost, whatever it did
 * not confirm is rewound and written again on the next one (Log seq numbers make that harmless).
 */

export type OutboxKind = 'started' | 'log' | 'finished';

export interface OutboxEntry<M> {
  /** The attempt it is about. */
  key: string;
  kind: OutboxKind;
  message: M;
  /** Log lines it carries (0 for Started and Finished), released when it is confirmed or dropped. */
  lines: number;
  /** For a Log, the seq of its last line: a LogAck at or past it confirms the entry. */
  lastSeq?: number;
}

interface Written<M> extends OutboxEntry<M> {
  /** Seq of the first Keepalive written after it: its KeepaliveAck confirms this entry. */
  confirmedBy: number;
}

export class Outbox<M> {
  #written: Written<M>[] = [];
  #unsent: OutboxEntry<M>[] = [];

  /** Entries not yet confirmed (written or not). */
  get size(): number {
    return this.#written.length + this.#unsent.length;
  }

  get unsentCount(): number {
    return this.#unsent.length;
  }

  push(entry: OutboxEntry<M>): void {
    this.#unsent.push(entry);
  }

  /** The next entry to write, without taking it. */
  peek(): OutboxEntry<M> | undefined {
    return this.#unsent[0];
  }

  /** Takes the next entry to write; it stays here, unconfirmed, until `confirmedBy` is acked. */
  shift(confirmedBy: number): OutboxEntry<M> | undefined {
    const entry = this.#unsent.shift();
    if (entry) this.#written.push({ ...entry, confirmedBy });
    return entry;
  }

  /**
   * KeepaliveAck `seq` arrived: Started entries written before that Keepalive are confirmed and
   * forgotten.
   */
  confirm(seq: number): void {
    this.#written = this.#written.filter((e) => e.kind !== 'started' || e.confirmedBy > seq);
  }

  /**
   * LogAck for `key` up to `lastSeq` arrived: its Log entries written whose lines are all stored
   * are forgotten. Returns the number of log lines released.
   */
  confirmLog(key: string, lastSeq: number): number {
    let released = 0;
    this.#written = this.#written.filter((e) => {
      if (e.kind !== 'log' || e.key !== key || (e.lastSeq ?? Infinity) > lastSeq) return true;
      released += e.lines;
      return false;
    });
    return released;
  }

  /**
   * Forgets every entry about one attempt (its FinishedAck arrived, or it was superseded).
   * Returns the number of log lines released.
   */
  remove(key: string): number {
    let released = 0;
    const keep = (e: OutboxEntry<M>) => {
      if (e.key !== key) return true;
      released += e.lines;
      return false;
    };
    this.#written = this.#written.filter(keep);
    this.#unsent = this.#unsent.filter(keep);
    return released;
  }

  /** True while the Finished of `key` is here (written or not). */
  hasFinished(key: string): boolean {
    return [...this.#written, ...this.#unsent].some((e) => e.key === key && e.kind === 'finished');
  }

  /** The stream was lost: everything it did not confirm is to be written again, in order. */
  rewind(): void {
    this.#unsent = [...this.#written.map(({ confirmedBy: _, ...e }) => e), ...this.#unsent];
    this.#written = [];
  }
}
