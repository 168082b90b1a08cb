import type { TaskDefinition } from '../core/dag-spec.js';
import type { Claim } from '../core/work-item.js';

/** A move to `scheduled` the planner may claim in the same write, if the dispatcher says so. */
export interface ClaimCandidate {
  tiId: string;
  executor: string;
  task: TaskDefinition;
}

/** What the dispatcher agreed to take with the moves (see `Dispatcher.claimAhead`). */
export interface ClaimsAhead {
  /** The TIs to claim with their move, each for its executor and, for placed work, its agent. */
  readonly claims: ReadonlyMap<string, { executor: string; agentId: string | null }>;
  /** The write answered: the claims made (a TI missing was not claimed). */
  answered(made: ReadonlyMap<string, Claim>): void;
  /** The claims made have been offered (or refused): their room is no longer held. */
  done(): void;
}

/** The room and placement a choice of claims ahead is made against. */
export interface ClaimRoom {
  /** Executor kinds that can run work here. */
  readonly executors: ReadonlySet<string>;
  /** How many TIs of this executor the pool takes at once now. */
  room(executor: string): number;
  /** Holds this much room until the returned function is called. */
  hold(n: number): () => void;
  /** Whether this executor places its work (on agents) before it is claimed. */
  places(executor: string): boolean;
  /** Places one TI at once for a claim made with its move; null if it cannot be placed now. */
  placeNow(c: ClaimCandidate): string | null;
  /** How the claim of a TI placed with `placeNow` went (its attempt's token, or null). */
  placed(executor: string, agentId: string, tiId: string, attemptToken: string | null): void;
}

/**
 * Chooses the moves to claim in the planner's own write. All of an executor's, when the pool
 * takes them at once together with the TIs of it already scheduled (`waiting`): the pool takes
 * offers in order, and a claimed TI it refused would have to be given back. Work that is placed
 * is claimed for the agent it is placed on now, oldest first, and the first that cannot be
 * placed stops it (later work never overtakes it). The room taken is held until `done()`, so a
 * step meanwhile cannot count it too.
 */
export function chooseClaimsAhead(
  candidates: readonly ClaimCandidate[],
  waiting: ReadonlyMap<string, number>,
  r: ClaimRoom,
): ClaimsAhead {
  const claims = new Map<string, { executor: string; agentId: string | null }>();
  const byExecutor = new Map<string, ClaimCandidate[]>();
  for (const c of candidates)
    if (r.executors.has(c.executor))
      (byExecutor.get(c.executor) ?? byExecutor.set(c.executor, []).get(c.executor)!).push(c);
  const holds: (() => void)[] = [];
  for (const [executor, list] of byExecutor) {
    if (list.length + (waiting.get(executor) ?? 0) > r.room(executor)) continue;
    let claimed = 0;
    for (const c of list) {
      const agentId = r.places(executor) ? r.placeNow(c) : null;
      if (r.places(executor) && agentId === null) break;
      claims.set(c.tiId, { executor, agentId });
      claimed++;
    }
    if (claimed > 0) holds.push(r.hold(claimed));
  }
  return {
    claims,
    answered(made) {
      for (const [tiId, c] of claims)
        if (c.agentId) r.placed(c.executor, c.agentId, tiId, made.get(tiId)?.attemptToken ?? null);
    },
    done() {
      for (const h of holds.splice(0)) h();
    },
  };
}
