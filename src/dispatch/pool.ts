import type { Logger } from 'pino';

export type OfferResult = 'accepted' | 'full' | 'duplicate' | 'closed';

export interface DispatchPoolOptions<T> {
  /** Number of drainers working at once. */
  workers: number;
  /** Items waiting (not yet taken by a drainer) at most. */
  capacity: number;
  /** Identity of an item: an item already waiting or in flight is not taken twice. */
  key(item: T): string;
  /** Does the slow part (claim, spawn, API call). Errors are logged and counted, never thrown. */
  dispatch(item: T): Promise<void>;
  logger: Logger;
  onDispatched?(item: T, seconds: number): void;
  onError?(item: T, err: unknown): void;
}

export interface DispatchPool<T> {
  /** Never blocks: when full the item is refused and stays `scheduled` for the next step. */
  offer(item: T): OfferResult;
  readonly depth: number;
  readonly inFlight: number;
  /** Stops accepting, forgets waiting items (they are still `scheduled` in the DB) and waits for
   *  in-flight dispatches to end. */
  close(): Promise<void>;
}

/**
 * The bounded queue between the scheduler's tick and the executors. The tick only enqueues;
 * drainers do the slow work, so a slow dispatch never slows the tick. Nothing here is critical
 * state: a crash loses only enqueues, and the next step re-offers what is still scheduled.
 */
export function createDispatchPool<T>(opts: DispatchPoolOptions<T>): DispatchPool<T> {
  if (!Number.isInteger(opts.workers) || opts.workers < 1) throw new Error('workers must be a positive integer');
  if (!Number.isInteger(opts.capacity) || opts.capacity < 1) throw new Error('capacity must be a positive integer');
  const waiting: T[] = [];
  const keys = new Set<string>();
  let busy = 0;
  let closed = false;
  let idle: (() => void) | null = null;

  const drain = async () => {
    while (waiting.length > 0 && !closed) {
      const item = waiting.shift()!;
      const started = performance.now();
      try {
        await opts.dispatch(item);
        opts.onDispatched?.(item, (performance.now() - started) / 1000);
      } catch (err) {
        opts.logger.error({ err, key: opts.key(item) }, 'dispatch failed');
        opts.onError?.(item, err);
      } finally {
        keys.delete(opts.key(item));
      }
    }
  };

  const startDrainer = () => {
    busy++;
    void drain().finally(() => {
      busy--;
      if (busy === 0) idle?.();
    });
  };

  return {
    offer(item) {
      if (closed) return 'closed';
      const key = opts.key(item);
      if (keys.has(key)) return 'duplicate';
      if (waiting.length >= opts.capacity) return 'full';
      keys.add(key);
      waiting.push(item);
      if (busy < opts.workers) startDrainer();
      return 'accepted';
    },
    get depth() {
      return waiting.length;
    },
    get inFlight() {
      return busy;
    },
    async close() {
      closed = true;
      for (const item of waiting.splice(0)) keys.delete(opts.key(item));
      if (busy > 0) await new Promise<void>((r) => (idle = r));
    },
  };
}
