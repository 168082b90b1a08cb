import type { Logger } from 'pino';
import type { Attempt } from '../../core/attempt.js';
import { needsSecretEnv } from '../../core/agent-features.js';
import { placeAttempt } from '../../core/placement.js';
import type { WorkItem } from '../../core/work-item.js';
import { AskForWork } from '../../dispatch/ask-for-work.js';
import { FleetView, takeSlot } from '../../dispatch/fleet-view.js';
import { ParkedWork } from '../../dispatch/parked-work.js';
import type { Placement } from '../../dispatch/placement.js';
import { placeRound, type PlacementOutcome, type Waiting } from '../../dispatch/placement-round.js';
import type { PlacementStore } from '../../dispatch/placement-store.js';

/**
 * Placement of work on standalone agents: chooses an agent for a scheduled TI (placement rules in
 * core/placement.ts), claims the TI for it, and hands the attempt to the agents executor to
 * deliver.
 *
 * Placement is serialized: the work waiting when a round begins is placed in order against one
 * view of the fleet (each placement taking its slot in the view, so two never take an agent's
 * last slot), then claimed in one write. Work arriving meanwhile waits for the next round
 * (placement-round.ts).
 *
 * Work that waits only for capacity (every eligible agent's slots taken) is parked here, oldest
 * first, and placed in the round that follows a slot freeing, without going back through the
 * scheduler (parked-work.ts). The fleet view counts each slot once, whichever of them takes or
 * frees it (fleet-view.ts).
 */
export class AgentPlacement implements Placement {
  #waiting: Waiting[] = [];
  #round: Promise<void> | null = null;
  #wake = false;
  readonly #fleet: FleetView;
  readonly #parked = new ParkedWork();
  readonly #asks: AskForWork;

  constructor(
    private readonly deps: {
      store: PlacementStore;
      /** Delivers a claimed attempt to its agent (the agents executor). */
      deliver(attempt: Attempt): Promise<void>;
      logger: Logger;
      cacheMs: number;
      /** How long work waits for a slot before why it waits is written (default 1 s): a TI placed
       *  sooner shows no reason, and costs no write for it. */
      reasonAfterMs?: number;
      /** The parked work runs low (or slots are free and none is left): the scheduler may have
       *  more to offer; `wanted` is what would fill the free slots and the parked work again. */
      onHungry?(wanted: number): void;
    },
  ) {
    this.#fleet = new FleetView(deps.store, deps.cacheMs);
    this.#asks = new AskForWork({
      parked: () => this.#parked.size,
      fleet: () => this.#fleet.cached,
      onHungry: deps.onHungry,
    });
  }

  /** Whether this TI is parked here, waiting for a slot (offering it again changes nothing). */
  parks(tiId: string): boolean {
    return this.#parked.has(tiId);
  }

  get parkedCount(): number {
    return this.#parked.size;
  }

  #kick(): void {
    if (this.#round) this.#wake = true;
    else this.#round = this.#rounds();
  }

  /** Drops the parked work (this replica no longer leads: the new leader offers it again). */
  forgetParked(): void {
    this.#parked.forget();
  }

  /** Tries the parked work again (the tick calls this: a slot may have freed on an agent of
   *  another replica, which this one only learns from a fresh view of the fleet). */
  retryParked(): void {
    if (this.#parked.size > 0) this.#kick();
  }

  /** Place, claim and deliver one TI. Never throws for "no agent": it says why the TI waits. */
  placeAndDispatch(work: WorkItem): Promise<PlacementOutcome> {
    return new Promise((resolve, reject) => {
      this.#waiting.push({ work, resolve, reject });
      this.#kick();
    });
  }

  /** Forget the cached fleet view (an agent connected, left, or was drained). */
  invalidate(): void {
    this.#fleet.invalidate();
    if (this.#parked.size > 0) this.#kick();
  }

  /**
   * An attempt's Finished arrived from its agent: the process is over, so its slot is free now,
   * before its end is written. The slot is counted by attempt, so it is freed exactly once: in
   * the cached view if that view counts it, and in every view read until the end is recorded
   * (the database still shows the attempt running until then).
   */
  finishing(agentId: string, attemptToken: string): void {
    this.#fleet.finishing(agentId, attemptToken);
    if (this.#parked.size > 0) this.#kick();
  }

  /** The end of an attempt that had finished was written (or refused): a view read from now on
   *  no longer counts it. */
  recorded(attemptToken: string): void {
    this.#fleet.recorded(attemptToken);
  }

  /**
   * Places one TI at once, from the cached view of the fleet, for a claim made elsewhere (the
   * planner claims it with its move): the agent's slot is taken in the view until `placed` says
   * how the claim went. Null when it cannot be placed without waiting: the view is not fresh, a
   * round is placing (its own view would not see this one), older work is waiting or parked, the
   * task limits its attempts per agent (that needs a read), or no agent has a free slot for it.
   */
  placeNow(work: { tiId: string; task: WorkItem['task'] }): string | null {
    const agents = this.#fleet.fresh();
    if (!agents) return null;
    if (this.#round || this.#waiting.length > 0 || this.#parked.size > 0) return null;
    if (work.task.placement?.maxParallelPerAgent) return null;
    const placement = placeAttempt(
      work.task.placement,
      agents.map((a) => ({ ...a, runningThisTask: 0 })),
      { secretEnv: needsSecretEnv(work.task) },
    );
    if (placement.kind !== 'placed') return null;
    const agent = agents.find((a) => a.agentId === placement.agentId)!;
    takeSlot(agent, work.tiId);
    this.#fleet.placedAhead(work.tiId, agent.agentId);
    return agent.agentId;
  }

  /** Reads the fleet again if the cached view is too old for `placeNow` (never rejects: a failed
   *  read only leaves work to be placed as before). */
  freshen(): Promise<void> {
    return this.#fleet.freshen(() => this.#round !== null);
  }

  /** The claim of a TI placed with `placeNow` was made (its attempt's token) or not (null). */
  placed(agentId: string, tiId: string, attemptToken: string | null): void {
    this.#fleet.placed(agentId, tiId, attemptToken);
    if (attemptToken === null && this.#parked.size > 0) this.#kick();
  }

  /** A claimed attempt was given back before it reached its agent: its slot is free again. */
  dropped(agentId: string, attemptToken: string): void {
    this.#fleet.dropped(agentId, attemptToken);
    if (this.#parked.size > 0) this.#kick();
  }

  async #rounds(): Promise<void> {
    try {
      do {
        this.#wake = false;
        if (this.#waiting.length === 0 && this.#parked.size === 0) break;
        await placeRound({
          store: this.deps.store,
          deliver: this.deps.deliver,
          logger: this.deps.logger,
          reasonAfterMs: this.deps.reasonAfterMs,
          fleet: this.#fleet,
          parked: this.#parked,
          asks: this.#asks,
          takeWaiting: () => this.#waiting.splice(0),
        });
        // Another round only for new work, or a slot freed meanwhile; else parked work waits for
        // released(), invalidate() or retryParked().
      } while (this.#wake || this.#waiting.length > 0);
    } catch (err) {
      // A round settles all its work itself; this is a bug, and must not stop every round after it.
      this.deps.logger.error({ err }, 'placement round failed');
    } finally {
      this.#round = null;
    }
  }

  /** Waits for the round in flight; no more asks for work. */
  async close(): Promise<void> {
    while (this.#round) await this.#round;
    this.#asks.close();
  }
}
