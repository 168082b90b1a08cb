/**
 * Reconnect delays: exponential with full jitter (a uniformly random delay between 0 and the
 * exponential ceiling), so a fleet of agents cut off by one control-plane restart does not come
 * back in lockstep and knock it over again.
 */

export interface BackoffOptions {
  /** Ceiling of the first delay. Default 100. */
  initialMs?: number;
  /** Largest ceiling. Default 10_000. */
  maxMs?: number;
  /** A uniform random number in [0, 1). Default Math.random; injectable for tests. */
  random?: () => number;
}

export class Backoff {
  readonly initialMs: number;
  readonly maxMs: number;
  readonly #random: () => number;
  #attempt = 0;

  constructor(opts: BackoffOptions = {}) {
    this.initialMs = opts.initialMs ?? 100;
    this.maxMs = opts.maxMs ?? 10_000;
    this.#random = opts.random ?? Math.random;
    if (!(this.initialMs > 0)) throw new RangeError(`backoff initialMs must be positive, got ${this.initialMs}`);
    if (!(this.maxMs >= this.initialMs)) throw new RangeError(`backoff maxMs must be at least initialMs, got ${this.maxMs}`);
  }

  /** How many delays were handed out since the last reset. */
  get attempt(): number {
    return this.#attempt;
  }

  /** The ceiling of the next delay: initialMs · 2^attempt, capped at maxMs. */
  ceilingMs(): number {
    // 2^attempt overflows to Infinity long after it passed the cap; min() handles both.
    return Math.min(this.maxMs, this.initialMs * 2 ** this.#attempt);
  }

  /** The next delay, in whole milliseconds, in [0, ceiling). */
  next(): number {
    const ceiling = this.ceilingMs();
    this.#attempt++;
    return Math.floor(this.#random() * ceiling);
  }

  /** Call once a connection has proved healthy: the next delay starts small again. */
  reset(): void {
    this.#attempt = 0;
  }
}
