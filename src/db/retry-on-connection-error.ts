import { isConnectionError } from './is-connection-error.js';

/**
 * Runs `op` again while it fails because the database cannot be reached, with jittered
 * exponential backoff, for up to `maxMs`. Other errors are thrown at once. Used for reports that
 * must not be lost to a database blip (an attempt's end): the writes are fenced by the attempt's
 * token, so repeating one is safe.
 */
export async function retryOnConnectionError<T>(
  op: () => Promise<T>,
  opts: { maxMs: number; onRetry?: (err: unknown, attempt: number) => void; giveUp?: AbortSignal },
): Promise<T> {
  const deadline = Date.now() + opts.maxMs;
  for (let attempt = 1; ; attempt++) {
    try {
      return await op();
    } catch (err) {
      // `giveUp`: a stopping server's time is up; what is not written by then is the next start's.
      if (!isConnectionError(err) || Date.now() >= deadline || opts.giveUp?.aborted) throw err;
      opts.onRetry?.(err, attempt);
      const cap = Math.min(5000, 100 * 2 ** Math.min(attempt, 10));
      await pause(Math.min(Math.random() * cap, Math.max(0, deadline - Date.now())), opts.giveUp);
    }
  }
}

/** Waits `ms`, or less when `signal` aborts meanwhile. */
function pause(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal?.addEventListener('abort', done, { once: true });
  });
}
