import type { Logger } from 'pino';
import type { Sql } from '../db/sql.js';
import { readTraceCursor, saveTraceCursor } from '../db/trace/trace-cursor.js';
import { traceSources } from '../db/trace/trace-sources.js';
import { lastSeqTaken, eventSeqName } from '../db/events/read-events.js';
import { WatcherBehindError, type EventFeed, type Watch } from '../feed/event-feed.js';
import { endsIn, spansOfEvents } from './spans-of-events.js';
import type { Tracing } from './tracing.js';

/** How often the recorder's place is saved at most (a new leader may export up to this again). */
const SAVE_MS = 1_000;
/** A saved place older than this is not gone back to: the recorder starts at the log's end. */
const CURSOR_MAX_AGE_MS = 60 * 60_000;
/** The recorder may fall this far behind the log before the feed cuts it off (it resumes from its place). */
const MAX_BEHIND = 100_000;

export interface SpanRecorder {
  /** This replica leads (record) or no longer does (stop). */
  lead(yes: boolean): void;
  close(): Promise<void>;
}

/**
 * The spans of runs and attempts, made from the events log by the leader: every end of an attempt
 * or a run is a state change recorded there, by whichever replica or agent caused it, so one
 * reader of the log sees them all, and no hot path does anything for tracing. It reads the log as
 * a background watcher of this replica's event feed (about once a second, in batches, not on each
 * commit) and saves its place, so the next leader goes on from it.
 */
export function createSpanRecorder(o: { sql: Sql; feed: EventFeed; tracing: Tracing; logger: Logger }): SpanRecorder {
  let watch: Watch | null = null;
  let leading = false;
  let chain: Promise<void> = Promise.resolve();

  async function startingPlace(): Promise<bigint> {
    return (await readTraceCursor(o.sql, CURSOR_MAX_AGE_MS)) ?? (await lastSeqTaken(o.sql, await eventSeqName(o.sql)));
  }

  async function record(): Promise<void> {
    let place = await startingPlace();
    let saved = place;
    let savedAt = Date.now();
    while (leading) {
      const w = await o.feed.watch({ afterSeq: place, maxBehind: MAX_BEHIND, background: true });
      watch = w;
      if (!leading) {
        w.close();
        break;
      }
      try {
        for (let batch = await w.next(); batch !== null; batch = await w.next()) {
          const upTo = BigInt(batch[batch.length - 1]!.seq);
          const ends = endsIn(batch);
          if (ends.tiIds.length + ends.endedRunIds.length > 0) {
            const { runs, events } = await traceSources(o.sql, { ...ends, upTo: upTo.toString() });
            for (const span of spansOfEvents(place, runs, events)) o.tracing.record(span);
          }
          place = upTo;
          if (place !== saved && Date.now() - savedAt >= SAVE_MS) {
            await saveTraceCursor(o.sql, place);
            saved = place;
            savedAt = Date.now();
          }
        }
      } catch (err) {
        if (!(err instanceof WatcherBehindError)) throw err;
        o.logger.warn(
          { resumeSeq: place.toString() },
          'span recorder fell behind the events log; resuming from its place',
        );
      } finally {
        w.close();
      }
    }
    if (place !== saved) await saveTraceCursor(o.sql, place);
  }

  /** Records while this replica leads; a failure (the database away) is retried. */
  async function recordWhileLeading(): Promise<void> {
    while (leading) {
      try {
        await record();
      } catch (err) {
        if (!leading) return;
        o.logger.error({ err }, 'span recorder failed; starting again in 1 s');
        await new Promise((r) => setTimeout(r, 1_000));
      }
    }
  }

  return {
    lead(yes) {
      if (yes === leading) return;
      leading = yes;
      // One loop at a time: a lead taken again waits for the last one to have stopped.
      if (yes) chain = chain.then(recordWhileLeading);
      else watch?.close();
    },
    async close() {
      leading = false;
      watch?.close();
      await chain;
    },
  };
}
