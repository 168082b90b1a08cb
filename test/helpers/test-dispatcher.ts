import type { WorkItem } from '../../src/core/work-item.js';
import { chooseClaimsAhead, type ClaimRoom } from '../../src/dispatch/claims-ahead.js';
import type { Dispatcher } from '../../src/dispatch/dispatcher.js';
import type { OfferResult } from '../../src/dispatch/pool.js';

/**
 * What a scheduler test scripts of a dispatcher, in the Dispatcher's own words: where offers go,
 * its room, what it holds live, and the `ClaimRoom` its `claimAhead` chooses against (no room to
 * claim with the move and nothing placed unless given). Read at each call, so a test may change
 * one between steps.
 */
export interface DispatcherScript {
  offer(item: WorkItem): OfferResult;
  executors: ReadonlySet<string>;
  /** How many more offers the pool takes now (absent: no limit). */
  room?(): number;
  holdsLive?(tiId: string, attemptToken: string): boolean;
  claimRoom?: ScriptedClaimRoom;
}

/** The room `claimAhead` chooses against. Work of the executor `agents` is placed: `placeNow` and `placed` are
 *  asked for it alone. */
export type ScriptedClaimRoom = Partial<Omit<ClaimRoom, 'executors' | 'places'>>;

/** Why a TI the scripted dispatcher answers `full` for waits. */
export const TEST_WAIT_REASON = 'WAITING_FOR_DISPATCH:queue 1 of 1 in use (--dispatch-queue)';

/** A dispatcher made of a script, choosing its claims ahead as the real one does. */
export function testDispatcher(script: DispatcherScript): Dispatcher {
  return {
    get executors() {
      return script.executors;
    },
    offer: (item) => script.offer(item),
    waitReason: TEST_WAIT_REASON,
    room: () => script.room?.() ?? Number.MAX_SAFE_INTEGER,
    claimAhead: (candidates, waiting) =>
      chooseClaimsAhead(candidates, waiting, {
        executors: script.executors,
        room: (executor) => script.claimRoom?.room?.(executor) ?? 0,
        hold: (n) => script.claimRoom?.hold?.(n) ?? (() => {}),
        places: (executor) => executor === 'agents',
        placeNow: (c) => script.claimRoom?.placeNow?.(c) ?? null,
        placed: (executor, agentId, tiId, token) => script.claimRoom?.placed?.(executor, agentId, tiId, token),
      }),
    freshenPlacement: async () => {},
    holdsLive: (tiId, token) => script.holdsLive?.(tiId, token) ?? false,
    cancel: () => false,
    forgetParked: () => {},
    whenRoom: () => {},
    drained: () => true,
    close: async () => {},
  };
}
