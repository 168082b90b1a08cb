import type { WorkItem } from '../../src/core/work-item.js';
import { chooseClaimsAhead } from '../../src/dispatch/claims-ahead.js';
import type { Dispatcher } from '../../src/dispatch/dispatcher.js';
import type { OfferResult } from '../../src/dispatch/pool.js';

/**
 * The parts of a dispatcher a scheduler test scripts: where offers go, the room to claim with the
 * move (none unless given), placement on agents (nothing placed unless given). Read at each call,
 * so a test may change one between steps.
 */
export interface DispatcherParts {
  offer(item: WorkItem): OfferResult;
  executors: ReadonlySet<string>;
  claimRoom?(executor: string): number;
  holdRoom?(n: number): () => void;
  placeNow?(work: { tiId: string; executor: string; task: WorkItem['task'] }): string | null;
  placed?(agentId: string, tiId: string, attemptToken: string | null): void;
  /** How many more offers the pool takes now (absent: no limit). */
  offerRoom?(): number;
  heldLive?(tiId: string, attemptToken: string): boolean;
}

/** Why a TI the scripted dispatcher answers `full` for waits. */
export const TEST_WAIT_REASON = 'WAITING_FOR_DISPATCH:queue 1 of 1 in use (--dispatch-queue)';

/** A dispatcher made of scripted parts, choosing its claims ahead as the real one does. */
export function testDispatcher(parts: DispatcherParts): Dispatcher {
  return {
    get executors() {
      return parts.executors;
    },
    offer: (item) => parts.offer(item),
    waitReason: TEST_WAIT_REASON,
    room: () => parts.offerRoom?.() ?? Number.MAX_SAFE_INTEGER,
    claimAhead: (candidates, waiting) =>
      chooseClaimsAhead(candidates, waiting, {
        executors: parts.executors,
        room: (executor) => parts.claimRoom?.(executor) ?? 0,
        hold: (n) => parts.holdRoom?.(n) ?? (() => {}),
        places: (executor) => executor === 'agents',
        placeNow: (c) => parts.placeNow?.(c) ?? null,
        placed: (_executor, agentId, tiId, token) => parts.placed?.(agentId, tiId, token),
      }),
    freshenPlacement: async () => {},
    holdsLive: (tiId, token) => parts.heldLive?.(tiId, token) ?? false,
    cancel: () => false,
    forgetParked: () => {},
    whenRoom: () => {},
    drained: () => true,
    close: async () => {},
  };
}
