import type { Logger } from 'pino';
import {
  anyOpen,
  eventSeqName,
  eventsAfter,
  lastSeqTaken,
  readEvents,
  type EventFilter,
  type EventRow,
} from '../db/events/read-events.js';
import { settledSeq } from '../db/events/settled-seq.js';
import type { Sql } from '../db/sql.js';

/** The most events one read of the feed takes; a bigger burst is read in turns. */
const READ_LIMIT = 5_000;
/** While a seq is missing and its writer may still commit, how often its end is looked for. */
const GAP_CHECK_MS = 20;
/** A NOTIFY lost while the listener reconnects is made up for by a look this often (one a replica). */
const BACKSTOP_MS = 1_000;

export interface WatchOptions extends EventFilter {
  /** Deliver only events after this seq (0: from the first). */
  afterSeq: bigint;
  /** The most events a watcher may have waiting when more come for it: past it, it is cut off. */
  maxBehind: number;
  /**
   * Called once, at the moment the watcher is cut off. `next()` then throws, but a stream whose
   * transport is blocked (its reader stopped) never calls it again: this tells it to end at once.
   */
  onCutOff?(): void;
  /**
   * The replica's own reader (the span recorder), not a client's: not counted by `watchers()`, and
   * content with what the once-a-second backstop reads, so with only such watchers the feed adds
   * no read to each transaction that writes events.
   */
  background?: boolean;
}

/** One watcher's view: events arrive in seq order, each once. */
export interface Watch {
  /** The next events (a batch), or null once closed. Throws `WatcherBehindError` if cut off. */
  next(): Promise<EventRow[] | null>;
  close(): void;
}

export class WatcherBehindError extends Error {
  constructor(
    readonly limit: number,
    readonly lastSeq: string,
  ) {
    super(
      `watcher fell more than ${limit} events behind and was cut off; ` +
        `reconnect with after_seq ${lastSeq} to go on without a gap`,
    );
  }
}

/** The replica is stopping: the watcher reconnects (to another replica) from its last seq. */
export class FeedClosedError extends Error {
  constructor(readonly lastSeq: string) {
    super(`this replica is shutting down; reconnect with after_seq ${lastSeq} to go on without a gap`);
  }
}

interface Watcher {
  filter: EventFilter;
  queue: EventRow[];
  /** Live events below this were replayed (or come before the watcher's cursor). */
  after: bigint;
  maxBehind: number;
  behind: boolean;
  onCutOff: (() => void) | undefined;
  wake: (() => void) | null;
  closed: boolean;
  background: boolean;
}

export interface EventFeed {
  watch(o: WatchOptions): Promise<Watch>;
  /** A NOTIFY said new events may be visible. */
  notified(): void;
  /** How many clients' watchers this replica feeds. */
  watchers(): number;
  close(): void;
}

function matches(f: EventFilter, e: EventRow): boolean {
  return (f.runId === undefined || e.run_id === f.runId) && (f.dagId === undefined || e.dag_id === f.dagId);
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/**
 * One replica's feed of events to all its watchers: one reader, woken by the `events` NOTIFY,
 * reads what is new once and fans it out, so the statements it runs do not grow with the number
 * of watchers. It delivers up to a horizon below which nothing more can commit: a seq is taken at
 * insert, so seq 11 may be committed while seq 10's transaction is still open; a missing seq
 * holds delivery back until the transactions open at the read have ended (then it was rolled back).
 * Only a watcher's first replay is its own query.
 */
export class ReplicaEventFeed implements EventFeed {
  readonly #sql: Sql;
  readonly #logger: Logger;
  readonly #watchers = new Set<Watcher>();
  /** Every committed event with seq <= horizon has been fanned out (null: not yet known). */
  #horizon: bigint | null = null;
  #horizonKnown: Promise<void> | null = null;
  #running = false;
  #again = false;
  #closed = false;
  #backstop: NodeJS.Timeout | null = null;
  /** Bumped when the last watcher leaves and the horizon is forgotten: a read begun before does not set it. */
  #gen = 0;
  #seqName: string | null = null;

  constructor(sql: Sql, logger: Logger) {
    this.#sql = sql;
    this.#logger = logger;
  }

  async watch(o: WatchOptions): Promise<Watch> {
    if (this.#closed) throw new Error('event feed closed');
    // Without watchers the feed does not read, and forgets its horizon.
    while (this.#horizon === null) {
      if (this.#closed) throw new Error('event feed closed');
      await (this.#horizonKnown ??= this.#establish());
    }
    const w: Watcher = {
      filter: { runId: o.runId, dagId: o.dagId },
      queue: [],
      after: 0n,
      maxBehind: o.maxBehind,
      behind: false,
      onCutOff: o.onCutOff,
      wake: null,
      closed: false,
      background: o.background ?? false,
    };
    let delivered = o.afterSeq.toString();
    // Registered and horizon read in one turn: live events are exactly those above it.
    const h0 = this.#horizon!;
    w.after = h0 > o.afterSeq ? h0 : o.afterSeq;
    this.#watchers.add(w);
    if (!this.#backstop) this.#backstop = setInterval(() => this.#pump(), BACKSTOP_MS);
    this.#pump();
    // The replay, a page at a time, up to the horizon it joined at.
    let cursor = o.afterSeq;
    const replay = async (): Promise<EventRow[] | null> => {
      if (cursor >= h0) return null;
      const page = await readEvents(this.#sql, w.filter, cursor, h0, 1000);
      if (page.length < 1000) cursor = h0;
      else cursor = BigInt(page[page.length - 1]!.seq);
      return page;
    };
    const close = () => {
      if (w.closed) return;
      w.closed = true;
      this.#watchers.delete(w);
      w.wake?.();
      if (this.#watchers.size === 0) {
        if (this.#backstop) clearInterval(this.#backstop);
        this.#backstop = null;
        this.#gen++;
        this.#horizon = null;
        this.#horizonKnown = null;
      }
    };
    return {
      next: async () => {
        while (!w.closed) {
          const page = await replay();
          if (page && page.length > 0) {
            delivered = page[page.length - 1]!.seq;
            return page;
          }
          if (page) continue;
          if (w.behind) {
            close();
            throw new WatcherBehindError(w.maxBehind, delivered);
          }
          if (w.queue.length > 0) {
            const batch = w.queue.splice(0, w.queue.length);
            delivered = batch[batch.length - 1]!.seq;
            return batch;
          }
          await new Promise<void>((r) => (w.wake = r));
          w.wake = null;
        }
        if (this.#closed) throw new FeedClosedError(delivered);
        return null;
      },
      close,
    };
  }

  notified(): void {
    for (const w of this.#watchers) {
      if (w.background) continue;
      this.#pump();
      return;
    }
  }

  watchers(): number {
    let n = 0;
    for (const w of this.#watchers) if (!w.background) n++;
    return n;
  }

  close(): void {
    this.#closed = true;
    if (this.#backstop) clearInterval(this.#backstop);
    for (const w of this.#watchers) {
      w.closed = true;
      w.wake?.();
    }
    this.#watchers.clear();
  }

  /** The horizon from scratch: the last seq taken, once every transaction open after it ended. */
  async #establish(): Promise<void> {
    const g = this.#gen;
    this.#seqName ??= await eventSeqName(this.#sql);
    const last = await settledSeq(this.#sql, () => !this.#closed);
    if (last !== null && g === this.#gen) this.#horizon = last;
    else this.#horizonKnown = null;
  }

  /**
   * Hands one read's events to each watcher. A watcher is cut off when events come for it while
   * it still has its bound waiting; a read is otherwise taken whole, so a burst larger than the
   * bound (at most READ_LIMIT) never cuts off a watcher that keeps up. What a watcher holds is
   * bounded by its bound plus one read.
   */
  #fanOut(rows: EventRow[]): void {
    for (const w of this.#watchers) {
      if (w.closed || w.behind) continue;
      const fresh = rows.filter((e) => BigInt(e.seq) > w.after && matches(w.filter, e));
      if (fresh.length === 0) continue;
      if (w.queue.length >= w.maxBehind) {
        w.behind = true;
        w.queue.length = 0;
        w.onCutOff?.();
      } else for (const e of fresh) w.queue.push(e);
      w.wake?.();
    }
  }

  /** Reads and fans out what committed since the horizon, as far as nothing can come below it. */
  async #advance(): Promise<void> {
    for (;;) {
      if (this.#closed || this.#horizon === null || this.#watchers.size === 0) return;
      const g = this.#gen;
      let from: bigint = this.#horizon;
      const last = await lastSeqTaken(this.#sql, this.#seqName!);
      if (last <= from) return;
      const upTo = last - from > BigInt(READ_LIMIT) ? from + BigInt(READ_LIMIT) : last;
      let { rows, open } = await eventsAfter(this.#sql, from, upTo);
      if (g !== this.#gen) return;
      if (BigInt(rows.length) !== upTo - from) {
        // A seq is missing: its writer is open (it will commit or roll back) or rolled back.
        // Deliver the part without a gap now; the rest once every writer open at the read ended.
        let contiguous = 0;
        while (contiguous < rows.length && BigInt(rows[contiguous]!.seq) === from + BigInt(contiguous + 1))
          contiguous++;
        if (contiguous > 0) {
          this.#fanOut(rows.slice(0, contiguous));
          from += BigInt(contiguous);
          this.#horizon = from;
        }
        while (!this.#closed && g === this.#gen && (await anyOpen(this.#sql, open))) await sleep(GAP_CHECK_MS);
        if (this.#closed || g !== this.#gen) return;
        rows = await readEvents(this.#sql, {}, from, upTo, READ_LIMIT);
      }
      this.#fanOut(rows);
      this.#horizon = upTo;
    }
  }

  #pump(): void {
    if (this.#running) {
      this.#again = true;
      return;
    }
    this.#running = true;
    void (async () => {
      try {
        do {
          this.#again = false;
          if (this.#horizon === null) await (this.#horizonKnown ??= this.#establish());
          await this.#advance();
        } while (this.#again && !this.#closed);
      } catch (err) {
        this.#logger.warn({ err }, 'event feed read failed; trying again');
        this.#horizonKnown = null;
        this.#horizon = null;
        await sleep(250);
        this.#again = true;
      } finally {
        this.#running = false;
        if (this.#again && !this.#closed && this.#watchers.size > 0) this.#pump();
      }
    })();
  }
}

export function createEventFeed(sql: Sql, logger: Logger): EventFeed {
  return new ReplicaEventFeed(sql, logger);
}
