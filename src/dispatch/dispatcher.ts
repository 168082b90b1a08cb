import type { Logger } from 'pino';
import { attemptOf } from '../core/attempt-env.js';
import type { Claim, WorkItem } from '../core/work-item.js';
import type { Executor } from '../executors/executor.js';
import { chooseClaimsAhead, type ClaimCandidate, type ClaimsAhead } from './claims-ahead.js';
import type { Placement } from './placement.js';
import { createDispatchPool, type DispatchPool, type OfferResult } from './pool.js';

export type { ClaimCandidate, ClaimsAhead };

/** The store operations the dispatcher needs (passed in: it is driven without a database in tests). */
export interface DispatchStore {
  /** Claims a scheduled TI for a new attempt on this executor; null when someone else moved it first. */
  claim(tiId: string, executor: string): Promise<Claim | null>;
  /** Gives a claim back (queued → scheduled) with the reason the TI waits. */
  release(claim: { tiId: string; tryNumber: number; attemptToken: string }, reason: string): Promise<unknown>;
}

/** What the dispatcher tells the metrics. */
export interface DispatchMetrics {
  dispatched(seconds: number): void;
  atCapacity(): void;
  depth(n: number): void;
}

export interface DispatcherOptions {
  /** Drainers working at once, and items waiting at most (the edition's dispatch pool). */
  workers: number;
  capacity: number;
  /** The executors of this replica by kind. */
  executors: ReadonlyMap<string, Executor>;
  /** For the executors whose work is placed before it is claimed (agents): their placement. */
  placements?: ReadonlyMap<string, Placement>;
  store: DispatchStore;
  /** This install's id, for the attempts' idempotency keys. */
  install: string;
  logger: Logger;
  metrics?: DispatchMetrics;
  /** Told of each attempt handed to its executor (for its dispatch span), with when the pool took it up. */
  dispatched?: (d: { item: WorkItem; tryNumber: number; start: Date }) => void;
}

/**
 * Everything between "this TI is scheduled" and "an executor has it": the bounded pool, routing
 * to the executor, claiming and releasing claims, the room in the pool and backpressure, and
 * placement for executors that place their work. The scheduler holds one of these.
 */
export interface Dispatcher {
  /** Executor kinds this replica runs; a TI needing another waits, saying so. */
  readonly executors: ReadonlySet<string>;
  /** Offers a scheduled TI; never blocks. A TI claimed with its move and not accepted is given back. */
  offer(item: WorkItem): OfferResult;
  /** Why a TI the pool refused (`full`) waits, naming the bound and its flag (see `waitingForDispatch`). */
  readonly waitReason: string;
  /** How many more offers the pool takes now. */
  room(): number;
  /**
   * Of these moves to `scheduled`, the ones to claim in the planner's own write: all of an
   * executor's when the pool takes them at once with the TIs of it already waiting (`waiting`),
   * and for work that is placed, those placed now in order until one cannot be. Their room in
   * the pool is held until `done()`.
   */
  claimAhead(candidates: readonly ClaimCandidate[], waiting: ReadonlyMap<string, number>): ClaimsAhead;
  /** Reads what placement places from again if it is getting old (never rejects). */
  freshenPlacement(): Promise<void>;
  /** Whether an executor of this replica runs this attempt now. */
  holdsLive(tiId: string, attemptToken: string): boolean;
  /** Stops a live attempt held here; false if no executor of this replica holds it. */
  cancel(tiId: string, reason: string): boolean;
  /** This replica no longer leads: work parked for placement is dropped (still scheduled). */
  forgetParked(): void;
  /**
   * Calls `listener` when the pool refused offers and has drained to half since: the scheduler
   * may offer them again. The listener says whether refused work still waits to be offered again;
   * while it does, it is called again as the pool drains (after each dispatch, while at most half
   * full), so a backlog larger than the room is offered batch by batch, not left to the tick.
   * One listener.
   */
  whenRoom(listener: () => boolean): void;
  /** Whether the pool has drained to half: the point at which refused work is offered again. */
  drained(): boolean;
  /** Stops taking offers and waits for the dispatches in flight. */
  close(): Promise<void>;
}

/**
 * Why a scheduled TI waits while the dispatch queue is at its bound. Said as a bound in use, with
 * the flag that sets it: Lite's queue holds 1, so a wide DAG's tasks routinely wait here (not an
 * overload). `WAITING_FOR_DISPATCH` is the code; what follows the colon is for people.
 */
export function waitingForDispatch(capacity: number): string {
  return `${WAITING_FOR_DISPATCH}:queue ${capacity} of ${capacity} in use (--dispatch-queue)`;
}

/** The code of `waitingForDispatch`'s reasons. */
export const WAITING_FOR_DISPATCH = 'WAITING_FOR_DISPATCH';

/** The Dispatcher of a replica: its pool, its executors and their placement. */
export class PoolDispatcher implements Dispatcher {
  readonly executors: ReadonlySet<string>;
  readonly waitReason: string;
  readonly #o: DispatcherOptions;
  readonly #placing: ReadonlyMap<string, Placement>;
  readonly #pool: DispatchPool<WorkItem>;
  /**
   * The pool refused an offer and that work still waits: each time a dispatch leaves the pool
   * drained to half, the scheduler is told there is room.
   */
  #refused = false;
  #onRoom: (() => boolean) | null = null;
  /** Room held for claims made with their moves and not offered yet. */
  #roomHeld = 0;

  constructor(o: DispatcherOptions) {
    this.#o = o;
    this.executors = new Set(o.executors.keys());
    this.waitReason = waitingForDispatch(o.capacity);
    this.#placing = o.placements ?? new Map();
    this.#pool = createDispatchPool<WorkItem>({
      workers: o.workers,
      capacity: o.capacity,
      key: (item) => item.tiId,
      logger: o.logger,
      onDispatched: (_item, seconds) => {
        o.metrics?.dispatched(seconds);
        if (this.#refused && this.drained()) this.#refused = this.#onRoom?.() ?? false;
      },
      dispatch: async (item) => {
        const start = new Date();
        const tryNumber = await this.#dispatchOne(item);
        if (tryNumber !== undefined) o.dispatched?.({ item, tryNumber, start });
      },
    });
  }

  offer(item: WorkItem): OfferResult {
    const o = this.#o;
    // Parked for placement, waiting for a slot: it is placed when one frees.
    const placer = this.#placing.get(item.executor);
    if (placer?.parks(item.tiId)) {
      placer.retryParked();
      return 'duplicate';
    }
    // The room held for claims made with their moves is theirs: other work sees it taken.
    const outcome = !item.claim && this.#pool.depth + this.#roomHeld >= o.capacity ? 'full' : this.#pool.offer(item);
    // Claimed with its move but not taken after all: give the claim back at once rather than
    // leave an attempt queued that no one will start.
    if (outcome !== 'accepted' && item.claim) {
      this.#giveBack(item, outcome === 'full' ? this.waitReason : 'DISPATCH_REFUSED');
    }
    if (outcome === 'full') {
      o.metrics?.atCapacity();
      this.#refused = true;
    }
    o.metrics?.depth(this.#pool.depth);
    return outcome;
  }

  room(): number {
    return Math.max(0, this.#o.capacity - this.#pool.depth - this.#roomHeld);
  }

  drained(): boolean {
    return this.#pool.depth <= this.#o.capacity / 2;
  }

  claimAhead(candidates: readonly ClaimCandidate[], waiting: ReadonlyMap<string, number>): ClaimsAhead {
    const placing = this.#placing;
    return chooseClaimsAhead(candidates, waiting, {
      executors: this.executors,
      room: () => this.room(),
      hold: (n) => {
        this.#roomHeld += n;
        let held = true;
        return () => {
          if (held) this.#roomHeld -= n;
          held = false;
        };
      },
      places: (executor) => placing.has(executor),
      placeNow: (c) => placing.get(c.executor)!.placeNow({ tiId: c.tiId, task: c.task }),
      placed: (executor, agentId, tiId, token) => placing.get(executor)!.placed(agentId, tiId, token),
    });
  }

  async freshenPlacement(): Promise<void> {
    await Promise.all([...this.#placing.values()].map((p) => p.freshen()));
  }

  holdsLive(tiId: string, attemptToken: string): boolean {
    return [...this.#o.executors.values()].some((e) => e.holdsLive?.(tiId, attemptToken) ?? false);
  }

  cancel(tiId: string, reason: string): boolean {
    // Every executor is told, not only the first that holds it: a pod's attempt is held both by
    // the kubernetes executor (which deletes the pod) and by the agent stream of its pod.
    return [...this.#o.executors.values()].map((e) => e.cancel(tiId, reason)).some(Boolean);
  }

  whenRoom(listener: () => boolean): void {
    this.#onRoom = listener;
  }

  forgetParked(): void {
    for (const p of this.#placing.values()) p.forgetParked();
  }

  async close(): Promise<void> {
    await this.#pool.close();
    await Promise.all([...this.#placing.values()].map((p) => p.close()));
  }

  /** Hands one item to its executor; resolves the try of the attempt handed over, if one was. */
  async #dispatchOne(item: WorkItem): Promise<number | undefined> {
    const executor = this.#o.executors.get(item.executor);
    if (!executor) throw new Error(`no executor "${item.executor}" on this replica`);
    const placer = this.#placing.get(item.executor);
    if (placer) {
      // Placed and claimed with its move: deliver it. Else placement first: the agent is chosen
      // before the claim, and a TI that cannot be placed stays scheduled, saying why.
      if (item.claim?.agentId) {
        await executor.dispatch(attemptOf(item, item.claim, this.#o.install, item.claim.agentId));
        return item.claim.tryNumber;
      }
      return (await placer.placeAndDispatch(item)).tryNumber;
    }
    const claim = item.claim ?? (await this.#o.store.claim(item.tiId, item.executor));
    if (!claim) return undefined; // someone else claimed it, or it was cancelled: nothing to do
    this.#o.logger.debug(
      { tiId: item.tiId, runId: item.runId, taskId: item.taskId, try: claim.tryNumber },
      'dispatching',
    );
    await executor.dispatch(attemptOf(item, claim, this.#o.install));
    return claim.tryNumber;
  }

  #giveBack(item: WorkItem, reason: string): void {
    const { tryNumber, attemptToken, agentId } = item.claim!;
    if (agentId) this.#placing.get(item.executor)?.dropped(agentId, attemptToken);
    void this.#o.store
      .release({ tiId: item.tiId, tryNumber, attemptToken }, reason)
      .catch((err: unknown) =>
        this.#o.logger.error({ err, tiId: item.tiId }, 'could not release a claim the dispatch pool refused'),
      );
  }
}

export function createDispatcher(o: DispatcherOptions): Dispatcher {
  return new PoolDispatcher(o);
}
