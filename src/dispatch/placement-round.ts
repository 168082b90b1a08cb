// One placing round: the parked work and the work that arrived, placed in order against one view
// of the fleet, then claimed in one write and delivered. Its own file: what a round does is read
// apart from how rounds are serialized (agent-placement.ts).
import type { Logger } from 'pino';
import type { Attempt } from '../core/attempt.js';
import { needsSecretEnv } from '../core/agent-features.js';
import { placeAttempt } from '../core/placement.js';
import type { WorkItem } from '../core/work-item.js';
import type { AskForWork } from './ask-for-work.js';
import { takeSlot, type FleetAgent, type FleetView } from './fleet-view.js';
import { CAPACITY_REASONS, type ParkedWork } from './parked-work.js';
import type { PlacementStore } from './placement-store.js';

export type PlacementOutcome =
  { kind: 'assigned'; agentId: string; tryNumber: number } | { kind: 'waiting'; reason: string } | { kind: 'lost' };

/** Work offered for placement, waiting for the next round. */
export interface Waiting {
  work: WorkItem;
  resolve(o: PlacementOutcome): void;
  reject(err: unknown): void;
}

/** Work a round placed on an agent, waiting for its claim. */
interface Placed {
  work: WorkItem;
  agent: FleetAgent;
  resolve(o: PlacementOutcome): void;
  reject(err: unknown): void;
}

/** How long parked work waits before why it waits is written (see `reasonAfterMs`). */
const REASON_AFTER_MS = 1000;

export interface RoundContext {
  store: PlacementStore;
  /** Delivers a claimed attempt to its agent (the agents executor). */
  deliver(attempt: Attempt): Promise<void>;
  logger: Logger;
  reasonAfterMs?: number;
  fleet: FleetView;
  parked: ParkedWork;
  asks: AskForWork;
  /** The work offered since the last round, taken (the next round gets what comes after). */
  takeWaiting(): Waiting[];
}

/**
 * One round: parked work first (it has waited longest), while any agent has a free slot, then
 * the work that arrived since the last round; then one claim for everything placed.
 */
export async function placeRound(r: RoundContext): Promise<void> {
  let agents: FleetAgent[];
  try {
    agents = await r.fleet.agents();
  } catch (err) {
    for (const w of r.takeWaiting()) w.reject(err);
    return;
  }
  // Taken after the fleet read: work offered in the same turn as the first joins this round.
  const fresh = r.takeWaiting();
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
      const load = await r.store.taskLoad(work.runId, work.taskId);
      candidates = all.map((v) => ({
        ...v,
        runningThisTask: (load.get(v.agentId) ?? 0) + (addedLoad.get(loadKey(work, v.agentId)) ?? 0),
      }));
    }
    const placement = placeAttempt(
      work.task.placement,
      candidates,
      { secretEnv: needsSecretEnv(work.task) },
      r.fleet.draining,
    );
    if (placement.kind === 'placed') {
      const agent = agents.find((a) => a.agentId === placement.agentId)!;
      // The slot is taken in the cached view until the next refresh (or until its attempt
      // finishes): by the TI until the claim names the attempt.
      takeSlot(agent, work.tiId);
      views.get(agent.agentId)!.running++;
      addedLoad.set(loadKey(work, agent.agentId), (addedLoad.get(loadKey(work, agent.agentId)) ?? 0) + 1);
      return { placement, agent };
    }
    return { placement, agent: null };
  };
  const reasonNow = (work: WorkItem, reason: string) => {
    if (work.pendingReason !== reason) reasons.set(work.tiId, reason);
  };

  for (const [tiId, work] of r.parked.inOrder()) {
    if (!anyFree()) break; // nothing parked can be placed: leave the rest as it is
    let outcome: Awaited<ReturnType<typeof place>>;
    try {
      outcome = await place(work);
    } catch {
      r.parked.unpark(tiId); // still scheduled: the tick offers it again
      continue;
    }
    const { placement, agent } = outcome;
    if (agent) {
      r.parked.unpark(tiId);
      placed.push({ work, agent, resolve: () => {}, reject: () => {} });
    } else if (placement.kind === 'waiting') {
      if (CAPACITY_REASONS.has(placement.reason)) r.parked.reasonLater(work, placement.reason);
      else {
        reasonNow(work, placement.reason);
        r.parked.unpark(tiId); // no eligible agent any more: the scheduler offers it again
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
    if (placement.kind === 'waiting' && CAPACITY_REASONS.has(placement.reason) && r.parked.hasRoom()) {
      r.parked.park(w.work, placement.reason);
    } else if (placement.kind === 'waiting') reasonNow(w.work, placement.reason);
    w.resolve(placement);
  }
  // The reasons of work parked long enough, oldest first.
  r.parked.takeDueReasons(reasons, performance.now() - (r.reasonAfterMs ?? REASON_AFTER_MS));

  // Why the rest waits is only shown to users: it is written alongside the claim, not ahead of
  // it, and a failed write leaves the old reason (the TIs are placed all the same).
  const reasonsWritten =
    reasons.size > 0
      ? r.store
          .setPendingReasons(reasons)
          .catch((err: unknown) =>
            r.logger.warn({ err, tis: reasons.size }, 'could not record why task instances wait'),
          )
      : null;
  try {
    r.asks.askIfHungry(all);
    if (placed.length > 0) await claimAndDeliver(r, placed);
  } finally {
    // The next round begins once this one's writes are done.
    await reasonsWritten;
  }
}

/** One claim for everything a round placed, then each Assign. */
async function claimAndDeliver(r: RoundContext, placed: Placed[]): Promise<void> {
  let claimed: Map<string, Attempt>;
  try {
    claimed = await r.store.claim(placed.map((p) => ({ work: p.work, agentId: p.agent.agentId })));
  } catch (err) {
    for (const p of placed) {
      r.fleet.claimed(p.agent.agentId, p.work.tiId, null);
      p.reject(err);
    }
    return;
  }
  // Delivered together: each Assign is recorded as sent to its agent's process first, and the
  // records of one round are one write.
  await Promise.all(
    placed.map(async (p) => {
      const attempt = claimed.get(p.work.tiId);
      r.fleet.claimed(p.agent.agentId, p.work.tiId, attempt?.attemptToken ?? null);
      if (!attempt) {
        p.resolve({ kind: 'lost' });
        return;
      }
      try {
        await r.deliver(attempt);
        p.resolve({ kind: 'assigned', agentId: p.agent.agentId, tryNumber: attempt.tryNumber });
      } catch (err) {
        p.reject(err);
      }
    }),
  );
}
