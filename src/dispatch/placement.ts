import type { TaskDefinition } from '../core/dag-spec.js';
import type { WorkItem } from '../core/work-item.js';

/**
 * Where an executor's attempts run is chosen before they are claimed (agents): the dispatcher
 * hands such work to its placement unclaimed, and may ask it to place work at once so the planner
 * can claim it with its move.
 */
export interface Placement {
  /** Places, claims and delivers one TI (resolving its attempt's try); a TI that cannot be placed
   *  stays scheduled, saying why. */
  placeAndDispatch(item: WorkItem): Promise<{ kind: string; tryNumber?: number }>;
  /** Places a TI at once from the current view, for a claim made elsewhere; null if it cannot. */
  placeNow(work: { tiId: string; task: TaskDefinition }): string | null;
  /** The claim of a TI placed with `placeNow` was made (its attempt's token) or not (null). */
  placed(agentId: string, tiId: string, attemptToken: string | null): void;
  /** A claimed attempt was given back before it was delivered: its slot is free again. */
  dropped(agentId: string, attemptToken: string): void;
  /** Reads the view `placeNow` places from again if it is getting old (never rejects). */
  freshen(): Promise<void>;
  /** Whether this TI is parked here, waiting for room; `retryParked` tries the parked work again. */
  parks(tiId: string): boolean;
  retryParked(): void;
  /** Drops the parked work (this replica no longer leads). */
  forgetParked(): void;
  /** Waits for the placement in flight. */
  close(): Promise<void>;
}
