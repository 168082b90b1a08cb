// The fleet of agents as placement sees it: a cached read of the store, reconciled with what the
// database may not show yet (slots freed by a Finished, taken by a placement or a recent claim).
// Its own file: counting each slot exactly once is its one job, whoever takes or frees it.
import type { AvailableAgent, PlacementStore } from './placement-store.js';

/** An agent in the cached fleet view: `running` is always `holding.size`. */
export interface FleetAgent extends Omit<AvailableAgent, 'holding'> {
  holding: Set<string>;
  running: number;
}

/** How a slot taken by a placement is counted until its claim names the attempt. */
const placing = (tiId: string) => `placing:${tiId}`;

/** Ends seen (Finished arrived) and claims answered, kept for the fleet views in flight; beyond
 *  this many, the oldest go. */
const MAX_ENDING = 10_000;
/** Claims answered longer ago than this are visible to any fleet read still on its way. */
const RECENT_MS = 10_000;

/** A placement of this TI takes a slot of the agent in the cached view, until its claim answers. */
export function takeSlot(agent: FleetAgent, tiId: string): void {
  agent.holding.add(placing(tiId));
  agent.running++;
}

/**
 * The cached view of the fleet placement places on. A slot is counted by attempt (or, until its
 * claim answers, by TI), so it is taken and freed exactly once in the view and in every read.
 */
export class FleetView {
  #cache: { fetchedAt: number; agents: FleetAgent[] } | null = null;
  /** Counts `invalidate()` calls: a view read before one (an agent drained meanwhile, say) is not kept. */
  #invalidations = 0;
  /** Attempts whose Finished has arrived (their slot is free on the agent), by attempt token, with
   *  when their end was recorded (null: not yet; the database still counts them). */
  #ending = new Map<string, { recordedAt: number | null }>();
  /** TIs placed with `placeNow` whose claim has not answered yet: TI → agent. */
  #placedAhead = new Map<string, string>();
  /** Claims answered lately, by attempt token: a view read sent before one may not show it. */
  #recentClaims = new Map<string, { agentId: string; at: number }>();
  /** The draining agents of the latest read: never placed on, only said in why work waits. */
  #draining: readonly AvailableAgent[] = [];

  constructor(
    private readonly store: Pick<PlacementStore, 'availableAgents'>,
    private readonly cacheMs: number,
  ) {}

  /** The cached view, however old (null: none, or forgotten). */
  get cached(): FleetAgent[] | null {
    return this.#cache?.agents ?? null;
  }

  /** The agents draining at the latest read of the fleet. */
  get draining(): readonly AvailableAgent[] {
    return this.#draining;
  }

  /** The cached view if it is younger than `cacheMs`, else null. */
  fresh(): FleetAgent[] | null {
    const cache = this.#cache;
    if (!cache || performance.now() - cache.fetchedAt >= this.cacheMs) return null;
    return cache.agents;
  }

  /** Forget the cached view (an agent connected, left, or was drained). */
  invalidate(): void {
    this.#cache = null;
    this.#invalidations++;
  }

  /** An attempt's Finished arrived: its slot is free, in the cached view and every view read
   *  until its end is recorded. */
  finishing(agentId: string, attemptToken: string): void {
    this.#ending.set(attemptToken, { recordedAt: null });
    const agent = this.#cache?.agents.find((a) => a.agentId === agentId);
    if (agent?.holding.delete(attemptToken)) agent.running--;
  }

  /** The end of an attempt that had finished was written (or refused): a view read from now on
   *  no longer counts it. */
  recorded(attemptToken: string): void {
    const e = this.#ending.get(attemptToken);
    if (e) e.recordedAt = performance.now();
    // Kept a while for views already on their way; the oldest go first.
    while (this.#ending.size > MAX_ENDING) this.#ending.delete(this.#ending.keys().next().value!);
  }

  /** A claimed attempt was given back before it reached its agent: its slot is free again. */
  dropped(agentId: string, attemptToken: string): void {
    const agent = this.#cache?.agents.find((a) => a.agentId === agentId);
    if (agent?.holding.delete(attemptToken)) agent.running--;
  }

  /** A TI was placed with `placeNow` on this agent (its slot taken with `takeSlot`); its claim is
   *  made elsewhere, and `placed` says how it went. */
  placedAhead(tiId: string, agentId: string): void {
    this.#placedAhead.set(tiId, agentId);
  }

  /** The claim of a TI placed with `placeNow` was made (its attempt's token) or not (null). */
  placed(agentId: string, tiId: string, attemptToken: string | null): void {
    this.#placedAhead.delete(tiId);
    this.claimed(agentId, tiId, attemptToken);
  }

  /** A placement's claim answered: its slot is now counted by its attempt, or freed (not claimed). */
  claimed(agentId: string, tiId: string, attemptToken: string | null): void {
    if (attemptToken !== null) {
      this.#recentClaims.set(attemptToken, { agentId, at: performance.now() });
      // Kept while a view read before them may still be on its way; the oldest go first.
      for (const [token, c] of this.#recentClaims) {
        if (this.#recentClaims.size <= MAX_ENDING && c.at > performance.now() - RECENT_MS) break;
        this.#recentClaims.delete(token);
      }
    }
    // The view of now (it may have been read again since the placement).
    const agent = this.#cache?.agents.find((a) => a.agentId === agentId);
    if (!agent) return;
    agent.holding.delete(placing(tiId));
    if (attemptToken !== null && !this.#ending.has(attemptToken)) agent.holding.add(attemptToken);
    agent.running = agent.holding.size;
  }

  /** Reads the fleet again if the cached view is too old for `placeNow` (never rejects: a failed
   *  read only leaves work to be placed as before). `busy` says a round is placing. */
  async freshen(busy: () => boolean): Promise<void> {
    if (busy() || (this.#cache && performance.now() - this.#cache.fetchedAt < this.cacheMs / 2)) return;
    const invalidations = this.#invalidations;
    let view: FleetAgent[];
    try {
      view = await this.#read();
    } catch {
      return; // placed as before, by a round
    }
    // A round that began meanwhile places on the view it took: it is left alone. A view read
    // before the fleet changed (an agent drained, gone, connected) would place on what was.
    if (!busy() && invalidations === this.#invalidations) this.#cache = { fetchedAt: performance.now(), agents: view };
  }

  /** The view a round places on: the cached one if fresh, else read (and cached). */
  async agents(): Promise<FleetAgent[]> {
    if (this.#cache && performance.now() - this.#cache.fetchedAt < this.cacheMs) return this.#cache.agents;
    // Read again if the fleet changed while the read was on its way (an agent drained must get
    // no more work); a few times at most, then the last read is used but not kept.
    for (let tries = 1; ; tries++) {
      const invalidations = this.#invalidations;
      const agents = await this.#read();
      if (invalidations === this.#invalidations) {
        this.#cache = { fetchedAt: performance.now(), agents };
        return agents;
      }
      if (tries === 3) return agents;
    }
  }

  /**
   * The fleet as the database shows it, reconciled exactly with what the database may not show
   * yet: attempts whose Finished arrived (their slot is free) until their end was recorded before
   * the read was sent; placements whose claim has not answered; claims answered after the read was
   * sent (it may have been taken before them).
   */
  async #read(): Promise<FleetAgent[]> {
    const sentAt = performance.now();
    const all = await this.store.availableAgents();
    this.#draining = all.filter((a) => a.draining);
    const rows = all.filter((a) => !a.draining);
    // What the read may not show, by agent (one pass over each, whatever the size of the fleet).
    const unseen = new Map<string, string[]>();
    const add = (agentId: string, key: string) =>
      (unseen.get(agentId) ?? unseen.set(agentId, []).get(agentId)!).push(key);
    for (const [token, c] of this.#recentClaims) if (c.at >= sentAt && !this.#ending.has(token)) add(c.agentId, token);
    for (const [tiId, agentId] of this.#placedAhead) add(agentId, placing(tiId));
    return rows.map((row) => {
      const holding = new Set(
        row.holding.filter((token) => {
          const e = this.#ending.get(token);
          return !e || (e.recordedAt !== null && e.recordedAt < sentAt);
        }),
      );
      for (const key of unseen.get(row.agentId) ?? []) holding.add(key);
      return { ...row, holding, running: holding.size };
    });
  }
}
