/**
 * Wakes whoever waits for "something changed" (a NOTIFY of new log lines or events), so a
 * follower re-reads when there is something to read instead of at an interval. One waiter list a
 * replica; each wait also ends after `ms`, in case a NOTIFY was lost to a reconnect.
 */
export interface ChangeSignal {
  wait(ms: number, abort?: AbortSignal): Promise<void>;
  fire(): void;
}

export function createChangeSignal(): ChangeSignal {
  let waiters: (() => void)[] = [];
  return {
    wait(ms, abort) {
      return new Promise<void>((resolve) => {
        const done = () => {
          clearTimeout(timer);
          abort?.removeEventListener('abort', done);
          resolve();
        };
        const timer = setTimeout(done, ms);
        abort?.addEventListener('abort', done, { once: true });
        waiters.push(done);
      });
    },
    fire() {
      const w = waiters;
      waiters = [];
      for (const f of w) f();
    },
  };
}
