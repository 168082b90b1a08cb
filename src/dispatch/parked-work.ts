// Work that waits only for a free slot, kept in memory to be placed as soon as one frees, and
// when why it waits is written. Its own file: parking is a hint with rules of its own (order,
// bound, a reason written late), apart from how a round places.
import type { WorkItem } from '../core/work-item.js';

/** Reasons that pass as soon as a slot frees: such work is parked here, not dropped. */
export const CAPACITY_REASONS = new Set(['AGENT_SLOTS_FULL', 'AGENT_MAX_PARALLEL']);
/** Parked work beyond this is dropped (it stays scheduled, and the tick offers it again). */
const MAX_PARKED = 10_000;

/**
 * Parked work, oldest first. Parking is only a hint: the TI stays `scheduled` in the database
 * (its reason says why), so a crash loses nothing and the tick offers it again.
 */
export class ParkedWork {
  #parked = new Map<string, WorkItem>();
  /** Parked TIs whose reason is not written yet, oldest first, with the reason and since when. */
  #reasonDue = new Map<string, { reason: string; since: number }>();

  has(tiId: string): boolean {
    return this.#parked.has(tiId);
  }

  get size(): number {
    return this.#parked.size;
  }

  /** Whether more work may be parked (beyond the bound it is dropped, and offered again). */
  hasRoom(): boolean {
    return this.#parked.size < MAX_PARKED;
  }

  /** Parks work that waits for a slot for `reason` (a copy: its pending reason is kept here). */
  park(work: WorkItem, reason: string): void {
    const parked = { ...work };
    this.#parked.set(parked.tiId, parked);
    this.reasonLater(parked, reason);
  }

  unpark(tiId: string): void {
    this.#parked.delete(tiId);
    this.#reasonDue.delete(tiId);
  }

  /** Drops the parked work (this replica no longer leads: the new leader offers it again). */
  forget(): void {
    this.#parked.clear();
    this.#reasonDue.clear();
  }

  /** Parked work, higher priority first, then oldest first (sorted only when a priority is set). */
  inOrder(): Iterable<[string, WorkItem]> {
    let prioritized = false;
    for (const w of this.#parked.values()) if (w.priority) prioritized = true;
    if (!prioritized) return this.#parked;
    // A copy: placing deletes from the map while the loop goes on.
    return [...this.#parked].sort(([, a], [, b]) => (b.priority ?? 0) - (a.priority ?? 0));
  }

  /** Parked work waiting for a slot: its reason is written once it has waited long enough. */
  reasonLater(work: WorkItem, reason: string): void {
    const due = this.#reasonDue.get(work.tiId);
    if (work.pendingReason === reason) this.#reasonDue.delete(work.tiId);
    else if (due) due.reason = reason;
    else this.#reasonDue.set(work.tiId, { reason, since: performance.now() });
  }

  /** Adds to `reasons` the reasons of work parked since `dueBy` or longer, oldest first. */
  takeDueReasons(reasons: Map<string, string>, dueBy: number): void {
    for (const [tiId, due] of this.#reasonDue) {
      if (due.since > dueBy) break;
      this.#reasonDue.delete(tiId);
      const work = this.#parked.get(tiId);
      if (!work) continue;
      reasons.set(tiId, due.reason);
      work.pendingReason = due.reason;
    }
  }
}
