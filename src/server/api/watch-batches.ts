import type { HandlerContext } from '@connectrpc/connect';
import type { Logger } from 'pino';
import type { EventRow } from '../../db/events/read-events.js';
import type { EventFeed, WatchOptions } from '../../feed/event-feed.js';
import { resetStreamKey } from './stream-reset.js';

/**
 * How long a watcher cut off by the feed has to take its pending messages before its stream is
 * reset. One that reads gets the RESOURCE_EXHAUSTED status naming its resume seq well within it;
 * one whose transport is blocked would otherwise hold its stream and its place in the feed forever.
 */
export const STALLED_STREAM_GRACE_MS = 2_000;

/**
 * A watch sends at most one message this often; what comes between goes in the next. A message's
 * cost (encoding, a frame, a write) is the same for one event as for a hundred, and a client's
 * watches each pay it for every write anywhere: under a flood of writes this is what bounds it.
 */
export const WATCH_MESSAGE_GAP_MS = 50;

/**
 * A watch's batches for a WatchRun/WatchRuns stream: closed when the call ends, and, when the feed
 * cuts the watcher off while the stream's writes are blocked (the client stopped reading), the
 * stream reset after a grace (see `stream-reset.ts`): a watcher that does not read is bounded.
 */
export async function* watchBatches(
  feed: EventFeed,
  o: WatchOptions,
  context: HandlerContext,
  logger: Logger,
): AsyncGenerator<EventRow[]> {
  let reset: NodeJS.Timeout | undefined;
  let yielded = o.afterSeq.toString();
  const watch = await feed.watch({
    ...o,
    onCutOff() {
      reset = setTimeout(() => {
        logger.warn(
          { runId: o.runId, dagId: o.dagId, buffer: o.maxBehind, lastSeqSent: yielded },
          'watcher fell behind and does not read: its stream is reset',
        );
        context.values.get(resetStreamKey)?.();
      }, STALLED_STREAM_GRACE_MS);
    },
  });
  const stop = () => watch.close();
  context.signal.addEventListener('abort', stop, { once: true });
  let sentAt = -Infinity;
  try {
    for (;;) {
      const early = sentAt + WATCH_MESSAGE_GAP_MS - performance.now();
      if (early > 0) await sleep(early, context.signal);
      const batch = await watch.next();
      if (batch === null) return;
      if (batch.length === 0) continue;
      yielded = batch[batch.length - 1]!.seq;
      sentAt = performance.now();
      yield batch;
    }
  } finally {
    clearTimeout(reset);
    context.signal.removeEventListener('abort', stop);
    watch.close();
  }
}

/** Resolves after `ms`, or at once when the call ends (the next `watch.next()` then sees it closed). */
function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(t);
      signal.removeEventListener('abort', done);
      resolve();
    };
    const t = setTimeout(done, ms);
    signal.addEventListener('abort', done, { once: true });
  });
}
