/**
 * Reconnect delays: exponential with full jitter (a uniformly random delay between 0 and the
 * exponential ceiling), so a fleet of agents cut off by one control-plane restart does not come
 * back in lockstep and knock it over again. The control plane may bound the ceiling further
 * (Welcome.max_reconnect_backoff): an agent that waits longer than a fraction of the heartbeat
 * threshold to come back has its attempts declared lost, finished or not.
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
  readonly #initialMs: number;
  readonly #maxMs: number;
  readonly #random: () => number;
  /** The control plane's bound on the ceiling; Infinity until one is given. */
  #boundMs = Number.POSITIVE_INFINITY;
  #attempt = 0;

  constructor(opts: BackoffOptions = {}) {
    this.#initialMs = opts.initialMs ?? 100;
    this.#maxMs = opts.maxMs ?? 10_000;
    this.#random = opts.random ?? Math.random;
    if (!(this.#initialMs > 0)) throw new RangeError(`backoff initialMs must be positive, got ${this.#initialMs}`);
    if (!(this.#maxMs >= this.#initialMs))
      throw new RangeError(`backoff maxMs must be at least initialMs, got ${this.#maxMs}`);
  }

  /** The largest ceiling: the agent's own maximum, or the control plane's bound if lower. */
  get maxMs(): number {
    return Math.min(this.#maxMs, this.#boundMs);
  }

  /** The ceiling of the first delay (never above `maxMs`). */
  get initialMs(): number {
    return Math.min(this.#initialMs, this.maxMs);
  }

  /**
   * Bounds every ceiling from now on by `maxMs` (Welcome.max_reconnect_backoff); it never raises
   * the agent's own maximum. A bound that is not a positive number is ignored.
   */
  bound(maxMs: number | undefined): void {
    if (maxMs !== undefined && Number.isFinite(maxMs) && maxMs > 0) this.#boundMs = maxMs;
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
