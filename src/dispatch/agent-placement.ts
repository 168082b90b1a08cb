import type { Logger } from 'pino';
import type { Attempt } from '../core/attempt.js';
import { needsSecretEnv } from '../core/agent-features.js';
import { placeAttempt, type AgentView } from '../core/placement.js';
import type { WorkItem } from '../core/work-item.js';
import type { Placement } from './placement.js';

/** A connected agent as the store reports it, with the replica holding its stream and the
 *  attempts (by attempt token) that take its slots. */
export interface AvailableAgent extends Omit<AgentView, 'runningThisTask' | 'running'> {
  connectedReplica: string;
  holding: string[];
}

/** An agent in the cached fleet view: `running` is always `holding.size`. */
interface FleetAgent extends Omit<AvailableAgent, 'holding'> {
  holding: Set<string>;
  running: number;
}

/** The store operations placement needs (passed in: it is driven without a database in tests). */
export interface PlacementStore {
  availableAgents(): Promise<AvailableAgent[]>;
  /** Attempts of this task (by DAG and task id) each agent holds now. */
  taskLoad(runId: string, taskId: string): Promise<Map<string, number>>;
  /** Claims each TI for its agent, all in one write. The attempts claimed, by ti id; a TI
   *  missing was moved by someone else first. */
  claim(claims: { work: WorkItem; agentId: string }[]): Promise<Map<string, Attempt>>;
  /** Writes the reasons these TIs wait (one write for all). */
  setPendingReasons(reasons: Map<string, string>): Promise<void>;
}

export type PlacementOutcome = { kind: 'assigned'; agentId: string; tryNumber: number } | { kind: 'waiting'; reason: string } | { kind: 'lost' };

/** Work a round placed on an agent, waiting for its claim. */
interface Placed {
  work: WorkItem;
  agent: FleetAgent;
  resolve(o: PlacementOutcome): void;
  reject(err: unknown): void;
}

interface Waiting {
  work: WorkItem;
  resolve(o: PlacementOutcome): void;
  reject(err: unknown): void;
}

/** How a slot taken by a placement is counted until its claim names the attempt. */
const placing = (tiId: string) => `placing:${tiId}`;

/** Reasons that pass as soon as a slot frees: such work is parked here, not dropped. */
const CAPACITY_REASONS = new Set(['AGENT_SLOTS_FULL', 'AGENT_MAX_PARALLEL']);
/** Parked work beyond this is dropped (it stays scheduled, and the tick offers it again). */
const MAX_PARKED = 10_000;
/** Ends seen (Finished arrived) and claims answered, kept for the fleet views in flight; beyond
 *  this many, the oldest go. */
const MAX_ENDING = 10_000;
/** Claims answered longer ago than this are visible to any fleet read still on its way. */
const RECENT_MS = 10_000;
/** At most this often, a round that found the parked work running low asks for more. */
const HUNGRY_EVERY_MS = 100;
/**
 * The parked work runs low below this many TIs, or this many times the fleet's slots if more:
 * more is asked for then, not once it is gone and a slot is free, so a freed slot finds work
 * already parked instead of waiting for a step.
 */
const LOW_WATER_MIN = 64;
const LOW_WATER_SLOTS = 4;
/** How long parked work waits before why it waits is written (see `reasonAfterMs`). */
const REASON_AFTER_MS = 1000;

/**
 * Placement of work on standalone agents: chooses an agent for a scheduled TI (placement rules in
 * core/placement.ts), claims the TI for it, and hands the attempt to the agents executor to
 * deliver.
 *
 * Placement is serialized: the work waiting when a round begins is placed in order against one
 * view of the fleet (each placement taking its slot in the view, so two never take an agent's
 * last slot), then claimed in one write. Work arriving meanwhile waits for the next round.
 *
 * Work that waits only for capacity (every eligible agent's slots taken) is parked here, oldest
 * first, and placed in the round that follows a slot freeing, without going back through the
 * scheduler. Parking is only a hint kept in memory: the TI stays `scheduled` in the database (its
 * reason says why), so a crash loses nothing and the tick offers it again.
 */
// Longer than our files usually are: the fleet view, the rounds and the parked work share one
// serialized state (a slot is counted once, whichever of them takes or frees it).
export class AgentPlacement implements Placement {
  #waiting: Waiting[] = [];
  #round: Promise<void> | null = null;
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
  #parked = new Map<string, WorkItem>();
  /** Parked TIs whose reason is not written yet, oldest first, with the reason and since when. */
  #reasonDue = new Map<string, { reason: string; since: number }>();
  #hungryAt = Number.NEGATIVE_INFINITY;
  /** An ask for more work made too soon after the last one, waiting for its turn. */
  #hungryLater: NodeJS.Timeout | null = null;
  #wake = false;

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
  ) {}

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
    this.#parked.clear();
    this.#reasonDue.clear();
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
    this.#cache = null;
    this.#invalidations++;
    if (this.#parked.size > 0) this.#kick();
  }

  /**
   * An attempt's Finished arrived from its agent: the process is over, so its slot is free now,
   * before its end is written. The slot is counted by attempt, so it is freed exactly once: in
   * the cached view if that view counts it, and in every view read until the end is recorded
   * (the database still shows the attempt running until then).
   */
  finishing(agentId: string, attemptToken: string): void {
    this.#ending.set(attemptToken, { recordedAt: null });
    const agent = this.#cache?.agents.find((a) => a.agentId === agentId);
    if (agent?.holding.delete(attemptToken)) agent.running--;
    if (this.#parked.size > 0) this.#kick();
  }

  /** The end of an attempt that had finished was written (or refused): a view read from now on
   *  no longer counts it. */
  recorded(attemptToken: string): void {
    const e = this.#ending.get(attemptToken);
    if (e) e.recordedAt = performance.now();
    // Kept a while for views already on their way; the oldest go first.
    while (this.#ending.size > MAX_ENDING) this.#ending.delete(this.#ending.keys().next().value!);
  }

  /**
   * Places one TI at once, from the cached view of the fleet, for a claim made elsewhere (the
   * planner claims it with its move): the agent's slot is taken in the view until `placed` says
   * how the claim went. Null when it cannot be placed without waiting: the view is not fresh, a
   * round is placing (its own view would not see this one), older work is waiting or parked, the
   * task limits its attempts per agent (that needs a read), or no agent has a free slot for it.
   */
  placeNow(work: { tiId: string; task: WorkItem['task'] }): string | null {
    const cache = this.#cache;
    if (!cache || performance.now() - cache.fetchedAt >= this.deps.cacheMs) return null;
    if (this.#round || this.#waiting.length > 0 || this.#parked.size > 0) return null;
    if (work.task.placement?.maxParallelPerAgent) return null;
    const placement = placeAttempt(work.task.placement, cache.agents.map((a) => ({ ...a, runningThisTask: 0 })), { secretEnv: needsSecretEnv(work.task) });
    if (placement.kind !== 'placed') return null;
    const agent = cache.agents.find((a) => a.agentId === placement.agentId)!;
    agent.holding.add(placing(work.tiId));
    agent.running++;
    this.#placedAhead.set(work.tiId, agent.agentId);
    return agent.agentId;
  }

  /** Reads the fleet again if the cached view is too old for `placeNow` (never rejects: a failed
   *  read only leaves work to be placed as before). */
  async freshen(): Promise<void> {
    if (this.#round || (this.#cache && performance.now() - this.#cache.fetchedAt < this.deps.cacheMs / 2)) return;
    const invalidations = this.#invalidations;
    let view: FleetAgent[];
    try {
      view = await this.#read();
    } catch {
      return; // placed as before, by a round
    }
    // A round that began meanwhile places on the view it took: it is left alone. A view read
    // before the fleet changed (an agent drained, gone, connected) would place on what was.
    if (!this.#round && invalidations === this.#invalidations) this.#cache = { fetchedAt: performance.now(), agents: view };
  }

  /** The claim of a TI placed with `placeNow` was made (its attempt's token) or not (null). */
  placed(agentId: string, tiId: string, attemptToken: string | null): void {
    this.#placedAhead.delete(tiId);
    this.#claimed(agentId, tiId, attemptToken);
    if (attemptToken === null && this.#parked.size > 0) this.#kick();
  }

  /** A claimed attempt was given back before it reached its agent: its slot is free again. */
  dropped(agentId: string, attemptToken: string): void {
    const agent = this.#cache?.agents.find((a) => a.agentId === agentId);
    if (agent?.holding.delete(attemptToken)) agent.running--;
    if (this.#parked.size > 0) this.#kick();
  }

  /** A placement's claim answered: its slot is now counted by its attempt, or freed (not claimed). */
  #claimed(agentId: string, tiId: string, attemptToken: string | null): void {
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

  async #agents(): Promise<FleetAgent[]> {
    if (this.#cache && performance.now() - this.#cache.fetchedAt < this.deps.cacheMs) return this.#cache.agents;
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
    const rows = await this.deps.store.availableAgents();
    // What the read may not show, by agent (one pass over each, whatever the size of the fleet).
    const unseen = new Map<string, string[]>();
    const add = (agentId: string, key: string) => (unseen.get(agentId) ?? unseen.set(agentId, []).get(agentId)!).push(key);
    for (const [token, c] of this.#recentClaims) if (c.at >= sentAt && !this.#ending.has(token)) add(c.agentId, token);
    for (const [tiId, agentId] of this.#placedAhead) add(agentId, placing(tiId));
    return rows.map((row) => {
      const holding = new Set(row.holding.filter((token) => {
        const e = this.#ending.get(token);
        return !e || (e.recordedAt !== null && e.recordedAt < sentAt);
      }));
      for (const key of unseen.get(row.agentId) ?? []) holding.add(key);
      return { ...row, holding, running: holding.size };
    });
  }

  /** Parked work, higher priority first, then oldest first (sorted only when a priority is set). */
  #parkedInOrder(): Iterable<[string, WorkItem]> {
    let prioritized = false;
    for (const w of this.#parked.values()) if (w.priority) prioritized = true;
    if (!prioritized) return this.#parked;
    // A copy: placing deletes from the map while the loop goes on.
    return [...this.#parked].sort(([, a], [, b]) => (b.priority ?? 0) - (a.priority ?? 0));
  }

  async #rounds(): Promise<void> {
    try {
      do {
        this.#wake = false;
        if (this.#waiting.length === 0 && this.#parked.size === 0) break;
        await this.#placeRound();
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

  /**
   * One round: parked work first (it has waited longest), while any agent has a free slot, then
   * the work that arrived since the last round; then one claim for everything placed.
   */
  async #placeRound(): Promise<void> {
    let agents: FleetAgent[];
    try {
      agents = await this.#agents();
    } catch (err) {
      for (const w of this.#waiting.splice(0)) w.reject(err);
      return;
    }
    // Taken after the fleet read: work offered in the same turn as the first joins this round.
    const fresh = this.#waiting;
    this.#waiting = [];
    // One view of the fleet for the round; a placement takes its slot in it (and in the cache).
    const views = new Map(agents.map((a) => [a.agentId, { ...a, runningThisTask: 0 }]));
    const all = [...views.values()];
    const anyFree = () => all.some((v) => v.running < v.slots);
    // max_parallel_per_agent counts this round's own placements of the task too.
    const addedLoad = new Map<string, number>();
    const loadKey = (w: WorkItem, agentId: string) => `${w.dagId}\u0000${w.taskId}\u0000${agentId}`;
    const placed: Placed[] = [];
    const reasons = new Map<string, string>();

    const place = async (work: WorkItem) => {
      let candidates = all;
      if (work.task.placement?.maxParallelPerAgent) {
        const load = await this.deps.store.taskLoad(work.runId, work.taskId);
        candidates = all.map((v) => ({ ...v, runningThisTask: (load.get(v.agentId) ?? 0) + (addedLoad.get(loadKey(work, v.agentId)) ?? 0) }));
      }
      const placement = placeAttempt(work.task.placement, candidates, { secretEnv: needsSecretEnv(work.task) });
      if (placement.kind === 'placed') {
        const agent = agents.find((a) => a.agentId === placement.agentId)!;
        // The slot is taken in the cached view until the next refresh (or until its attempt
        // finishes): by the TI until the claim names the attempt.
        agent.holding.add(placing(work.tiId));
        agent.running++;
        views.get(agent.agentId)!.running++;
        addedLoad.set(loadKey(work, agent.agentId), (addedLoad.get(loadKey(work, agent.agentId)) ?? 0) + 1);
        return { placement, agent };
      }
      return { placement, agent: null };
    };
    /** Parked work waiting for a slot: its reason is written once it has waited long enough. */
    const reasonLater = (work: WorkItem, reason: string) => {
      const due = this.#reasonDue.get(work.tiId);
      if (work.pendingReason === reason) this.#reasonDue.delete(work.tiId);
      else if (due) due.reason = reason;
      else this.#reasonDue.set(work.tiId, { reason, since: performance.now() });
    };
    const reasonNow = (work: WorkItem, reason: string) => {
      if (work.pendingReason !== reason) reasons.set(work.tiId, reason);
    };
    const unpark = (tiId: string) => {
      this.#parked.delete(tiId);
      this.#reasonDue.delete(tiId);
    };

    for (const [tiId, work] of this.#parkedInOrder()) {
      if (!anyFree()) break; // nothing parked can be placed: leave the rest as it is
      let outcome: Awaited<ReturnType<typeof place>>;
      try {
        outcome = await place(work);
      } catch {
        unpark(tiId); // still scheduled: the tick offers it again
        continue;
      }
      const { placement, agent } = outcome;
      if (agent) {
        unpark(tiId);
        placed.push({ work, agent, resolve: () => {}, reject: () => {} });
      } else if (placement.kind === 'waiting') {
        if (CAPACITY_REASONS.has(placement.reason)) reasonLater(work, placement.reason);
        else {
          reasonNow(work, placement.reason);
          unpark(tiId); // no eligible agent any more: the scheduler offers it again
        }
      }
    }
    for (const w of fresh) {
      let outcome: Awaited<ReturnType<typeof place>>;
      try {
        outcome = await place(w.work);
      } catch (err) {
        w.reject(err);
        continue;
      }
      const { placement, agent } = outcome;
      if (agent) {
        placed.push({ work: w.work, agent, resolve: w.resolve, reject: w.reject });
        continue;
      }
      if (placement.kind === 'waiting' && CAPACITY_REASONS.has(placement.reason) && this.#parked.size < MAX_PARKED) {
        const work = { ...w.work };
        this.#parked.set(work.tiId, work);
        reasonLater(work, placement.reason);
      } else if (placement.kind === 'waiting') reasonNow(w.work, placement.reason);
      w.resolve(placement);
    }
    // The reasons of work parked long enough, oldest first.
    const dueBy = performance.now() - (this.deps.reasonAfterMs ?? REASON_AFTER_MS);
    for (const [tiId, due] of this.#reasonDue) {
      if (due.since > dueBy) break;
      this.#reasonDue.delete(tiId);
      const work = this.#parked.get(tiId);
      if (!work) continue;
      reasons.set(tiId, due.reason);
      work.pendingReason = due.reason;
    }

    // Why the rest waits is only shown to users: it is written alongside the claim, not ahead of
    // it, and a failed write leaves the old reason (the TIs are placed all the same).
    const reasonsWritten =
      reasons.size > 0
        ? this.deps.store.setPendingReasons(reasons).catch((err: unknown) => this.deps.logger.warn({ err, tis: reasons.size }, 'could not record why task instances wait'))
        : null;
    try {
      this.#askIfHungry(all);
      if (placed.length > 0) await this.#claimAndDeliver(placed);
    } finally {
      // The next round begins once this one's writes are done.
      await reasonsWritten;
    }
  }

  /**
   * Asks the scheduler for more work when the parked work runs low, or slots are free and none is
   * parked: for what would fill the free slots and the parked work again. At most every
   * `HUNGRY_EVERY_MS`; an ask that comes sooner is made once that time has passed, if the fleet
   * (as last seen) still wants work then. Dropped instead, the last ask of a burst was lost
   * whenever the burst's work all ended within the interval: nothing was parked, no round ran
   * again, and the backlog waited for the tick (a second's stall at concurrency 50).
   */
  #askIfHungry(fleet: readonly { slots: number; running: number }[]): void {
    const slots = fleet.reduce((n, v) => n + v.slots, 0);
    const free = fleet.reduce((n, v) => n + Math.max(0, v.slots - v.running), 0);
    const lowWater = Math.max(LOW_WATER_MIN, LOW_WATER_SLOTS * slots);
    if (this.#parked.size >= lowWater || (free === 0 && this.#parked.size === 0)) return;
    const wait = this.#hungryAt + HUNGRY_EVERY_MS - performance.now();
    if (wait > 0) {
      this.#hungryLater ??= setTimeout(() => {
        this.#hungryLater = null;
        if (this.#cache) this.#askIfHungry(this.#cache.agents);
      }, wait);
      return;
    }
    this.#hungryAt = performance.now();
    this.deps.onHungry?.(Math.max(free, lowWater - this.#parked.size));
  }

  /** One claim for everything a round placed, then each Assign. */
  async #claimAndDeliver(placed: Placed[]): Promise<void> {
    let claimed: Map<string, Attempt>;
    try {
      claimed = await this.deps.store.claim(placed.map((p) => ({ work: p.work, agentId: p.agent.agentId })));
    } catch (err) {
      for (const p of placed) {
        this.#claimed(p.agent.agentId, p.work.tiId, null);
        p.reject(err);
      }
      return;
    }
    // Delivered together: each Assign is recorded as sent to its agent's process first, and the
    // records of one round are one write.
    await Promise.all(
      placed.map(async (p) => {
        const attempt = claimed.get(p.work.tiId);
        this.#claimed(p.agent.agentId, p.work.tiId, attempt?.attemptToken ?? null);
        if (!attempt) {
          p.resolve({ kind: 'lost' });
          return;
        }
        try {
          await this.deps.deliver(attempt);
          p.resolve({ kind: 'assigned', agentId: p.agent.agentId, tryNumber: attempt.tryNumber });
        } catch (err) {
          p.reject(err);
        }
      }),
    );
  }

  /** Waits for the round in flight; no more asks for work. */
  async close(): Promise<void> {
    while (this.#round) await this.#round;
    if (this.#hungryLater) clearTimeout(this.#hungryLater);
    this.#hungryLater = null;
  }
}
