import type { Dispatcher } from '../dispatch/dispatcher.js';

/**
 * Runs with scheduled TIs a full dispatch pool refused, in the order they were refused. When the
 * pool has drained, the step that offers their work again reads as many of them as the pool has
 * room for, oldest refusal first, not every active run: a backlog on a full pool costs a step per
 * drain the size of the room, and the loop never spins re-reading what cannot be dispatched yet.
 * A hint kept in memory: the tick offers what is still waiting anyway.
 */
export class RoomWaiters {
  // A Set keeps insertion order: a run refused again goes to the back, behind those before it.
  readonly #runs = new Set<string>();

  refused(runId: string): void {
    this.#runs.delete(runId);
    this.#runs.add(runId);
  }

  /** These runs are being read and offered again: a new refusal puts them back. */
  reading(runIds: Iterable<string>): void {
    for (const id of runIds) this.#runs.delete(id);
  }

  /** The `n` runs refused longest ago, no longer listed. */
  take(n: number): string[] {
    const out: string[] = [];
    for (const id of this.#runs) {
      if (out.length >= n) break;
      out.push(id);
    }
    this.reading(out);
    return out;
  }

  get size(): number {
    return this.#runs.size;
  }

  clear(): void {
    this.#runs.clear();
  }
}

/** The re-offering of refused work, driven by the dispatcher's drains and the loop's steps. */
export interface RefusedWork {
  /** Runs one step: a batch nudged before it began is read by it; at its end, the next batch if
   *  the pool has drained to half by then. */
  around<T>(step: () => Promise<T>): Promise<T>;
  /** This replica no longer leads: nothing is waiting or being offered again. */
  clear(): void;
}

/**
 * Offers refused work again as the pool drains, batch by batch until none is left: the runs
 * refused longest ago, as many as there is room for, in one nudged step; the next batch once that
 * step is done and the pool has drained to half again (at the step's end, or at a later dispatch).
 * Not a spin: a batch is taken only when there is room, and what is refused again waits for the
 * next drain. The tick's sweep stays the safety net.
 */
export function offerRefusedAsRoomFrees(
  waiters: RoomWaiters,
  dispatcher: Pick<Dispatcher, 'room' | 'drained' | 'whenRoom'>,
  nudge: (runIds: string[]) => void,
): RefusedWork {
  // A batch was nudged and the next step to begin reads it; that step is running.
  let asked = false;
  let reading = false;
  const offerBatch = () => {
    if (asked || reading || waiters.size === 0) return;
    asked = true;
    nudge(waiters.take(Math.max(1, dispatcher.room())));
  };
  dispatcher.whenRoom(() => {
    offerBatch();
    return asked || reading || waiters.size > 0;
  });
  return {
    async around(step) {
      reading = asked;
      asked = false;
      try {
        return await step();
      } finally {
        if (reading) {
          reading = false;
          if (dispatcher.drained()) offerBatch();
        }
      }
    },
    clear() {
      waiters.clear();
      asked = false;
      reading = false;
    },
  };
}
