/**
 * The completion cache in front of the executors: an attempt of a task with `cache:` has its key
 * evaluated (the run's conf and its inputs) and its entry looked up before it is handed to its
 * executor. A hit ends it with the earlier result and nothing runs; an entry another live attempt
 * holds is waited for (its pending reason says so), then taken or reused. An attempt of a task
 * without `cache:` goes straight through: no read, no round trip.
 */
import type { Logger } from 'pino';
import { cacheKeyHash } from '../core/cache-key.js';
import type { Attempt } from '../core/attempt.js';
import type { AttemptInputs } from '../core/task-inputs.js';
import type { Executor } from '../executors/executor.js';

/** Where an attempt stands with its entry (db/cache/take-cache-entry.ts). */
export type GateTake =
  | { kind: 'run' }
  | { kind: 'hit'; value: string | null; source: { tiId: string; runId: string; tryNumber: number } }
  | { kind: 'wait'; holder: { runId: string; taskId: string; tryNumber: number } }
  | { kind: 'gone' };

/** The store operations the gate needs, passed in. */
export interface CacheGateStore {
  inputs(attempt: Attempt): Promise<AttemptInputs>;
  take(attempt: Attempt, keyHash: string): Promise<GateTake>;
  finishFromCache(attempt: Attempt, take: GateTake & { kind: 'hit' }, keyHash: string): Promise<boolean>;
  /** Says the attempt is alive (it waits); false when it is no longer current. */
  heartbeat(attempt: Attempt): Promise<boolean>;
  pending(attempt: Attempt, reason: string | null): Promise<void>;
}

export interface CacheGateOptions {
  store: CacheGateStore;
  logger: Logger;
  /** A cached attempt ended: the scheduler has its run's next moves to decide. */
  ended(runId: string): void;
  /** How often a waiting attempt looks again. */
  pollMs?: number;
}

export class CacheGate {
  readonly #o: CacheGateOptions;
  /** Attempts waiting for another's result, by ti id → token: alive here, so never reaped. */
  readonly #waiting = new Map<string, string>();
  #closed = false;

  constructor(o: CacheGateOptions) {
    this.#o = o;
  }

  /** Hands `attempt` to `run` unless the cache ends it; a wait goes on after this resolves. */
  async dispatch(attempt: Attempt, run: (a: Attempt) => Promise<void>): Promise<void> {
    if (!attempt.cache) return run(attempt);
    const inputs = attempt.inputs ?? (await this.#o.store.inputs(attempt));
    if ('error' in inputs) return run({ ...attempt, inputs });
    const ready: Attempt = { ...attempt, inputs };
    const keyHash = cacheKeyHash(attempt.cache.key, runConf(attempt), JSON.parse(inputs.json) as unknown);
    const first = await this.#o.store.take(ready, keyHash);
    if (first.kind !== 'wait') return this.#settle(ready, first, keyHash, run);
    this.#waiting.set(attempt.tiId, attempt.attemptToken);
    void this.#wait(ready, first, keyHash, run)
      .catch((err: unknown) => this.#o.logger.error({ err, tiId: attempt.tiId }, 'waiting for a cached result failed'))
      .finally(() => {
        if (this.#waiting.get(attempt.tiId) === attempt.attemptToken) this.#waiting.delete(attempt.tiId);
      });
  }

  holdsLive(tiId: string, attemptToken: string): boolean {
    return this.#waiting.get(tiId) === attemptToken;
  }

  /** Stops a waiting attempt (cancelled): it stops looking; its end is the canceller's. */
  cancel(tiId: string): boolean {
    return this.#waiting.delete(tiId);
  }

  close(): void {
    this.#closed = true;
  }

  /** Wraps an executor: its attempts pass the gate first. */
  wrap(inner: Executor): Executor {
    return {
      kind: inner.kind,
      dispatch: (a) => this.dispatch(a, (x) => inner.dispatch(x)),
      cancel: (tiId, reason) => this.cancel(tiId) || inner.cancel(tiId, reason),
      get activeCount() {
        return inner.activeCount;
      },
      holdsLive: (tiId, token) => this.holdsLive(tiId, token) || (inner.holdsLive?.(tiId, token) ?? false),
      ...(inner.adopt ? { adopt: () => inner.adopt!() } : {}),
      shutdown: (waitMs) => {
        this.close();
        return inner.shutdown(waitMs);
      },
    };
  }

  async #wait(attempt: Attempt, take: GateTake, keyHash: string, run: (a: Attempt) => Promise<void>): Promise<void> {
    const pollMs = this.#o.pollMs ?? 500;
    let said: string | null = null;
    while (take.kind === 'wait') {
      const reason =
        `CACHE_WAIT: run ${take.holder.runId} runs ${take.holder.taskId} (try ${take.holder.tryNumber}) ` +
        'with the same cache key; this task takes its result';
      if (reason !== said) await this.#o.store.pending(attempt, (said = reason));
      await new Promise((r) => setTimeout(r, pollMs).unref());
      if (this.#closed || this.#waiting.get(attempt.tiId) !== attempt.attemptToken) return;
      if (!(await this.#o.store.heartbeat(attempt))) return;
      take = await this.#o.store.take(attempt, keyHash);
    }
    if (take.kind === 'run') await this.#o.store.pending(attempt, null);
    await this.#settle(attempt, take, keyHash, run);
  }

  async #settle(attempt: Attempt, take: GateTake, keyHash: string, run: (a: Attempt) => Promise<void>) {
    if (take.kind === 'run') return run(attempt);
    if (take.kind !== 'hit') return;
    if (await this.#o.store.finishFromCache(attempt, take, keyHash)) {
      this.#o.logger.info(
        { tiId: attempt.tiId, runId: attempt.runId, taskId: attempt.taskId, source: take.source },
        `task ${attempt.taskId} success (cached)`,
      );
      this.#o.ended(attempt.runId);
    }
  }
}

/** The run's conf, as its attempts see it in LEOFLOW_RUN_CONF. */
function runConf(attempt: Attempt): unknown {
  try {
    return JSON.parse(attempt.env.LEOFLOW_RUN_CONF ?? '{}') as unknown;
  } catch {
    return {};
  }
}
