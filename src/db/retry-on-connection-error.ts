import { isConnectionError } from './is-connection-error.js';

/**
 * Runs `op` again while it fails because the database cannot be reached, with jittered
 * exponential backoff, for up to `maxMs`. Other errors are thrown at once. Used for reports that
 * must not be lost to a database blip (an attempt's end): the writes are fenced by the attempt's
 * token, so repeating one is safe.
 */
export async function retryOnConnectionError<T>(op: () => Promise<T>, opts: { maxMs: number; onRetry?: (err: unknown, attempt: number) => void }): Promise<T> {
  const deadline = Date.now() + opts.maxMs;
  for (let attempt = 1; ; attempt++) {
    try {
      return await op();
    } catch (err) {
      if (!isConnectionError(err) || Date.now() >= deadline) throw err;
      opts.onRetry?.(err, attempt);
      const cap = Math.min(5000, 100 * 2 ** Math.min(attempt, 10));
      await new Promise((r) => setTimeout(r, Math.min(Math.random() * cap, Math.max(0, deadline - Date.now()))));
    }
  }
}
