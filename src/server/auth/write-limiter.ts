import { setTimeout as delay } from 'node:timers/promises';
import { Code, ConnectError, type Interceptor } from '@connectrpc/connect';
import type { DescMethod } from '@bufbuild/protobuf';
import { callerKey } from './caller.js';
import { RPC_ROLES } from './rpc-roles.js';
import type { WriteShare } from './write-share.js';

/** Past this many callers, the buckets that have refilled (their callers quiet) are dropped. */
const SWEEP_AT = 1_024;
/**
 * How long the refusal of a caller that ignored its last `retry-after` is held before it is sent.
 * A closed-loop client resends each refusal at once: answered at once, it is refused hundreds of
 * times a second, and each costs the server a call; held, its loop slows to its calls in flight a second.
 */
export const IGNORED_RETRY_HOLD_MS = 1_000;
/**
 * The API's buckets hold this many seconds of writes: a script's burst (a backfill of a hundred
 * runs, a folder of DAGs applied) goes at once, and only a sustained flood meets the rate.
 */
export const WRITE_BURST_SECONDS = 10;

/**
 * Writes a second for each caller, as token buckets: a caller may make `perSecond` writes a
 * second on average and `burst` at once after a quiet while. One client's flood is refused
 * before it costs the database anything, and every other client's writes go on.
 */
export class WriteLimiter {
  readonly #buckets = new Map<string, { tokens: number; at: number; retryAt: number; ignored: boolean }>();

  constructor(
    readonly perSecond: number,
    readonly now: () => number = () => performance.now(),
    readonly burst: number = perSecond,
  ) {}

  /** Takes one write for `caller`: null when it may go, else the ms until one more may. */
  take(caller: string): number | null {
    const t = this.now();
    let b = this.#buckets.get(caller);
    if (b) {
      b.tokens = Math.min(this.burst, b.tokens + ((t - b.at) * this.perSecond) / 1000);
      b.at = t;
    } else {
      if (this.#buckets.size >= SWEEP_AT) this.#sweep(t);
      this.#buckets.set(caller, (b = { tokens: this.burst, at: t, retryAt: 0, ignored: false }));
    }
    if (b.tokens >= 1) {
      b.tokens -= 1;
      b.ignored = false;
      return null;
    }
    // Less a hair, so a float's last bit never adds a millisecond.
    const wait = Math.ceil(((1 - b.tokens) * 1000) / this.perSecond - 1e-9);
    b.ignored = t < b.retryAt;
    b.retryAt = t + wait;
    return wait;
  }

  /** After a refusal of `caller`: how long to hold it, IGNORED_RETRY_HOLD_MS if it came before its retry-after. */
  holdMs(caller: string): number {
    return this.#buckets.get(caller)?.ignored ? IGNORED_RETRY_HOLD_MS : 0;
  }

  /** Callers quiet for long enough have full buckets: forgetting them changes nothing. */
  #sweep(t: number): void {
    const refill = (1000 * this.burst) / this.perSecond;
    for (const [caller, b] of this.#buckets) if (t - b.at >= refill) this.#buckets.delete(caller);
  }
}

const key = (m: DescMethod) => `${m.parent.typeName}/${m.name}`;

/**
 * Holds every caller to `--max-token-writes`: the RPCs that write (those an operator or an admin
 * needs) take from the caller's bucket, after the token guard has named the caller. The caller is
 * its API token (`byToken`: auth is on), or with auth off the peer's host. Refused: RESOURCE_EXHAUSTED naming
 * the limit, and `retry-after-ms` in the trailers says when one more write would be let in.
 */
export function writeLimit(
  limiter: WriteLimiter,
  byToken: boolean,
  refused: (rpc: string, limit: 'writes' | 'concurrent_writes') => void,
  share?: WriteShare,
): Interceptor {
  const writes = new Set([...RPC_ROLES].filter(([, role]) => role !== 'viewer').map(([m]) => key(m)));
  return (next) => async (req) => {
    if (!writes.has(`${req.service.typeName}/${req.method.name}`)) return next(req);
    const caller = req.contextValues.get(callerKey);
    const who = byToken ? `API token "${caller.id}"` : `caller ${caller.id} at ${caller.peer.replace(/:\d+$/, '')}`;
    const waitMs = limiter.take(who);
    if (waitMs !== null) {
      refused(req.method.name, 'writes');
      // Held, the refusal costs a timer, not another call; the caller's own calls in flight wait on it.
      const hold = limiter.holdMs(who);
      if (hold > 0) await delay(hold, undefined, { signal: req.signal }).catch(() => {});
      throw new ConnectError(
        `${req.method.name}: ${who} made more than ` +
          `${limiter.perSecond} writes a second, the limit (--max-token-writes ${limiter.perSecond}): ` +
          `retry in ${waitMs} ms`,
        Code.ResourceExhausted,
        { 'retry-after-ms': String(waitMs) },
      );
    }
    // A unary write holds its place until answered; a streaming one (WatchCleanHistory) is bounded as a stream.
    if (!share || req.stream) return next(req);
    let leave: () => void;
    try {
      leave = await share.enter(who, () => `${req.method.name}: ${who}`);
    } catch (err) {
      refused(req.method.name, 'concurrent_writes');
      // Its line is full: it sends without waiting for answers, so this refusal is held too.
      await delay(IGNORED_RETRY_HOLD_MS, undefined, { signal: req.signal }).catch(() => {});
      throw err;
    }
    try {
      return await next(req);
    } finally {
      leave();
    }
  };
}
