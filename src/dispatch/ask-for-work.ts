// When placement asks the scheduler for more work: as the parked work runs low, not once it is
// gone, and at most so often. Its own file: the pacing of these asks is a tuning of its own.
import type { FleetAgent } from './fleet-view.js';

/** At most this often, a round that found the parked work running low asks for more. */
const HUNGRY_EVERY_MS = 100;
/**
 * The parked work runs low below this many TIs, or this many times the fleet's slots if more:
 * more is asked for then, not once it is gone and a slot is free, so a freed slot finds work
 * already parked instead of waiting for a step.
 */
const LOW_WATER_MIN = 64;
const LOW_WATER_SLOTS = 4;

/** Asks the scheduler for more work (`onHungry`) when the parked work runs low, paced. */
export class AskForWork {
  #hungryAt = Number.NEGATIVE_INFINITY;
  /** An ask for more work made too soon after the last one, waiting for its turn. */
  #hungryLater: NodeJS.Timeout | null = null;

  constructor(
    private readonly deps: {
      /** How many TIs are parked now. */
      parked(): number;
      /** The fleet as last seen (null: none cached). */
      fleet(): readonly FleetAgent[] | null;
      /** `wanted` is what would fill the free slots and the parked work again. */
      onHungry?(wanted: number): void;
    },
  ) {}

  /**
   * Asks the scheduler for more work when the parked work runs low, or slots are free and none is
   * parked: for what would fill the free slots and the parked work again. At most every
   * `HUNGRY_EVERY_MS`; an ask that comes sooner is made once that time has passed, if the fleet
   * (as last seen) still wants work then. Dropped instead, the last ask of a burst was lost
   * whenever the burst's work all ended within the interval: nothing was parked, no round ran
   * again, and the backlog waited for the tick (a second's stall at concurrency 50).
   */
  askIfHungry(fleet: readonly { slots: number; running: number }[]): void {
    const parked = this.deps.parked();
    const slots = fleet.reduce((n, v) => n + v.slots, 0);
    const free = fleet.reduce((n, v) => n + Math.max(0, v.slots - v.running), 0);
    const lowWater = Math.max(LOW_WATER_MIN, LOW_WATER_SLOTS * slots);
    if (parked >= lowWater || (free === 0 && parked === 0)) return;
    const wait = this.#hungryAt + HUNGRY_EVERY_MS - performance.now();
    if (wait > 0) {
      this.#hungryLater ??= setTimeout(() => {
        this.#hungryLater = null;
        const cached = this.deps.fleet();
        if (cached) this.askIfHungry(cached);
      }, wait);
      return;
    }
    this.#hungryAt = performance.now();
    this.deps.onHungry?.(Math.max(free, lowWater - parked));
  }

  /** No more asks: the one waiting for its turn is dropped. */
  close(): void {
    if (this.#hungryLater) clearTimeout(this.#hungryLater);
    this.#hungryLater = null;
  }
}
