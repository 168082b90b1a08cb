import { useEffect, useRef } from 'react';
import type { RunEvent } from '../../gen/leoflow/v1/workflow_pb.js';

/** A broken stream is opened again after 1 s, then 2, 4, … at most 10 s apart while it keeps failing. */
const RETRY_FIRST_MS = 1_000;
const RETRY_MAX_MS = 10_000;

type Open = (afterSeq: string, signal: AbortSignal) => AsyncIterable<{ events: RunEvent[] }>;

/**
 * Follows a watch stream (WatchRun, WatchRuns) for as long as the component lives, handing each
 * batch to `onEvents`. A stream that ends or breaks (a replica restarting, a laptop waking up) is
 * opened again from the last seq received, so no event is missed and none is seen twice.
 * It starts after `fromSeq` (0: the whole history); with null it waits until a seq is known.
 */
export function useEventStream(
  key: string,
  open: Open,
  onEvents: (events: RunEvent[]) => void,
  fromSeq: string | null = '0',
): void {
  const handler = useRef(onEvents);
  handler.current = onEvents;
  const opener = useRef(open);
  opener.current = open;
  useEffect(() => {
    if (fromSeq === null) return;
    const ctl = new AbortController();
    let seq = fromSeq;
    void (async () => {
      let wait = RETRY_FIRST_MS;
      while (!ctl.signal.aborted) {
        try {
          for await (const batch of opener.current(seq, ctl.signal)) {
            wait = RETRY_FIRST_MS;
            const last = batch.events.at(-1);
            if (last) seq = last.seq;
            if (batch.events.length > 0) handler.current(batch.events);
          }
        } catch {
          // Reopened below from the last seq received.
        }
        if (ctl.signal.aborted) break;
        await new Promise((r) => setTimeout(r, wait));
        wait = Math.min(wait * 2, RETRY_MAX_MS);
      }
    })();
    return () => ctl.abort();
  }, [key, fromSeq]);
}

/** An event's payload, as the server wrote it (to, from, task_id, try, reason, ...). */
export function payloadOf(e: RunEvent): Record<string, unknown> {
  try {
    return JSON.parse(e.payloadJson) as Record<string, unknown>;
  } catch {
    return {};
  }
}
