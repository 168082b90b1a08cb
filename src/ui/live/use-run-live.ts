import { useCallback, useEffect, useRef, useState } from 'react';
import type { Run, TaskInstance } from '../../gen/leoflow/v1/types_pb.js';
import type { RunEvent } from '../../gen/leoflow/v1/workflow_pb.js';
import { workflow } from '../api/clients.js';
import { useEventStream } from './use-event-stream.js';

export interface RunWithTasks {
  run: Run;
  tis: TaskInstance[];
}

/**
 * A run and its task instances, read again when its WatchRun stream says something moved (at most
 * one read per 300 ms, whatever the number of tasks): pushed, never polled. `onEvents` sees the
 * stream's events too, from the run's first. Without it the stream starts where the first read
 * stands (its `watch_seq`, as Kubernetes watches from a list's resourceVersion): replaying a finished
 * run's history would only read the run again, all its pages (a 100,000-item map: seconds), once
 * for each batch of old events. `onFirstRun` is called with the run as soon as its first read
 * answers, before the page draws it: what else the page asks for starts a draw earlier.
 */
export function useRunLive(
  runId: string,
  onEvents?: (events: RunEvent[]) => void,
  onFirstRun?: (run: Run) => void,
): { view: RunWithTasks | null; error: string | null; reload(): void } {
  const [view, setView] = useState<RunWithTasks | null>(null);
  const [error, setError] = useState<string | null>(null);
  const timer = useRef<ReturnType<typeof setTimeout> | null>(null);
  const first = useRef(onFirstRun);
  // One read at a time: a read asked for while one is on its way follows it, once. Reads of a big
  // run's pages take longer than the 300 ms between events, and overlapping ones only pile up.
  const reading = useRef({ busy: false, again: false });
  // Where the stream starts: the run's first event, or (null until known) where a read stands.
  const [fromSeq, setFromSeq] = useState<string | null>(onEvents ? '0' : null);
  const streamFrom = useRef(fromSeq);
  streamFrom.current = fromSeq;
  const load = useCallback(() => {
    const r = reading.current;
    if (r.busy) {
      r.again = true;
      return;
    }
    r.busy = true;
    const read = (): void => {
      r.again = false;
      const withWatchSeq = streamFrom.current === null;
      // The first page names the run: what the page asks for next need not wait for the others.
      readAllPages(runId, withWatchSeq, (run) => {
        first.current?.(run);
        first.current = undefined;
      })
        .then((res) => {
          if (res.run) setView({ run: res.run, tis: res.tis });
          if (withWatchSeq && res.run) setFromSeq(res.watchSeq);
          setError(null);
        })
        .catch((err: Error) => setError(err.message))
        .finally(() => {
          if (r.again) read();
          else r.busy = false;
        });
    };
    read();
  }, [runId]);
  useEffect(load, [load]);
  useEffect(() => () => void (timer.current && clearTimeout(timer.current)), []);
  useEventStream(
    `run/${runId}`,
    (afterSeq, signal) => workflow.watchRun({ runId, afterSeq, follow: true }, { signal }),
    (events) => {
      onEvents?.(events);
      if (timer.current) return;
      timer.current = setTimeout(() => {
        timer.current = null;
        load();
      }, 300);
    },
    fromSeq,
  );
  return { view, error, reload: load };
}

/**
 * Every task instance of a run, a GetRun page at a time (a big map's mapped instances take several),
 * and where a watch that follows the read starts, when asked (the first page's).
 */
async function readAllPages(
  runId: string,
  withWatchSeq: boolean,
  onRun: (run: Run) => void,
): Promise<{ run?: Run; tis: TaskInstance[]; watchSeq: string }> {
  const tis: TaskInstance[] = [];
  let pageToken = '';
  let watchSeq = '0';
  for (;;) {
    const res = await workflow.getRun({ runId, pageToken, withWatchSeq: withWatchSeq && pageToken === '' });
    if (pageToken === '') {
      watchSeq = res.watchSeq;
      if (res.run) onRun(res.run);
    }
    tis.push(...res.taskInstances);
    pageToken = res.nextPageToken;
    if (pageToken === '') return { run: res.run, tis, watchSeq };
  }
}
