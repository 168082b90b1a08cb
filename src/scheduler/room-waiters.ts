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
