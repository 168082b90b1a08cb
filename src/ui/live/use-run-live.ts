import { useCallback, useEffect, useRef, useState } from 'react';
import type { Run, TaskInstance } from '../../gen/leoflow/v1/types_pb.js';
import type { RunEvent } from '../../gen/leoflow/v1/workflow_pb.js';
import { workflow } from '../api/clients.js';
import { useEventStream } from './use-event-stream.js';

export interface RunView {
  run: Run;
  tis: TaskInstance[];
}

/**
 * A run and its task instances, read again when its WatchRun stream says something moved (at most
 * one read per 300 ms, whatever the number of tasks): pushed, never polled. `onEvents` sees the
 * stream's events too, from the run's first. `onFirstRun` is called with the run as soon as its
 * first read answers, before the page draws it: what else the page asks for starts a draw earlier.
 */
export function useRunLive(
  runId: string,
  onEvents?: (events: RunEvent[]) => void,
  onFirstRun?: (run: Run) => void,
): { view: RunView | null; error: string | null; reload(): void } {
  const [view, setView] = useState<RunView | null>(null);
  const [error, setError] = useState<string | null>(null);
  const timer = useRef<ReturnType<typeof setTimeout> | null>(null);
  const first = useRef(onFirstRun);
  const load = useCallback(() => {
    workflow
      .getRun({ runId })
      .then((res) => {
        if (res.run && first.current) {
          first.current(res.run);
          first.current = undefined;
        }
        if (res.run) setView({ run: res.run, tis: res.taskInstances });
        setError(null);
      })
      .catch((err: Error) => setError(err.message));
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
  );
  return { view, error, reload: load };
}
