/**
 * Wakes whoever waits for a run's "something changed" (a NOTIFY of new log lines or events), so a
 * follower re-reads when there is something to read instead of at an interval. A NOTIFY names the
 * runs it concerns (migration 031), and only their waiters wake: a follower of one run costs
 * nothing when others write. Each wait also ends after `ms`, in case a NOTIFY was lost to a reconnect.
 */
export interface ChangeSignal {
  wait(runId: string, ms: number, abort?: AbortSignal): Promise<void>;
  /** `payload`: the NOTIFY's comma-separated run ids; '' wakes every waiter (too many runs to name). */
  fire(payload: string): void;
}

export function createChangeSignal(): ChangeSignal {
  const waiters = new Map<string, Set<() => void>>();
  const wake = (runId: string) => {
    const w = waiters.get(runId);
    if (!w) return;
    waiters.delete(runId);
    for (const f of w) f();
  };
  return {
    wait(runId, ms, abort) {
      return new Promise<void>((resolve) => {
        const done = () => {
          clearTimeout(timer);
          abort?.removeEventListener('abort', done);
          const w = waiters.get(runId);
          w?.delete(done);
          if (w?.size === 0) waiters.delete(runId);
          resolve();
        };
        const timer = setTimeout(done, ms);
        abort?.addEventListener('abort', done, { once: true });
        let w = waiters.get(runId);
        if (!w) waiters.set(runId, (w = new Set()));
        w.add(done);
      });
    },
    fire(payload) {
      if (payload === '') for (const runId of [...waiters.keys()]) wake(runId);
      else for (const runId of payload.split(',')) wake(runId);
    },
  };
}
