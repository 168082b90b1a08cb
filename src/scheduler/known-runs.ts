import type { RunRead } from './prefetched-runs.js';

/** Beyond this many runs, the ones remembered longest ago are forgotten. */
const MAX_KNOWN = 10_000;

/**
 * What the planner last knew of each running run: the run and its task instances as its last
 * step left them (the moves it applied included). The leader plans a run ahead of an attempt's end
 * from it (plan.ts, `planAhead`), without waiting to read the run again.
 *
 * Only a hint: a run may have changed since in ways this does not show (a sibling's end, a claim,
 * a cancel on another replica), and a plan decided from it states what it assumed, which the
 * database checks as it applies the plan (apply-plan.ts, `expect`). Out of date costs a plan that
 * does not apply (the step that follows the end plans as before), never a wrong move. Anything
 * known to change a run otherwise (a trigger, a clear, a cancel, another replica's news) forgets it.
 */
export class KnownRuns {
  #runs = new Map<string, RunRead>();
  #runOfTi = new Map<string, string>();
  /** Runs whose memory is what the database holds now, as far as planning goes (`markCurrent`). */
  #current = new Set<string>();
  #seq = 0;
  /** When each run last changed in a way its memory may not show (an end on its way, a forget). */
  #changedAt = new Map<string, number>();
  /** Every run changed at or before this (everything was forgotten). */
  #floor = 0;
  /** Runs ended ahead of their step (their DAG by run id), until a step takes them. */
  #endedAhead = new Map<string, string>();

  /** The run and task instances as they are now, as far as this replica's planner knows. */
  remember(read: RunRead): void {
    this.#drop(read.run.id);
    this.#runs.set(read.run.id, read);
    for (const ti of read.tis) this.#runOfTi.set(ti.id, read.run.id);
    while (this.#runs.size > MAX_KNOWN) this.#drop(this.#runs.keys().next().value!);
  }

  /** The run this task instance belongs to, if known. */
  ofTi(tiId: string): RunRead | undefined {
    const runId = this.#runOfTi.get(tiId);
    return runId === undefined ? undefined : this.#runs.get(runId);
  }

  /** Forgets these runs (every run, when none are named). */
  forget(runIds?: readonly string[]): void {
    if (!runIds || runIds.length === 0) {
      this.#runs.clear();
      this.#runOfTi.clear();
      this.#endedAhead.clear();
      this.#current.clear();
      this.#changedAt.clear();
      this.#floor = ++this.#seq;
      return;
    }
    for (const id of runIds) {
      this.#drop(id);
      this.#changed(id);
    }
  }

  /** Why these task instances wait, as just written (null: no reason), where remembered. */
  noteReasons(reasons: ReadonlyMap<string, string | null>): void {
    const byRun = new Map<string, Map<string, string | null>>();
    for (const [tiId, reason] of reasons) {
      const runId = this.#runOfTi.get(tiId);
      if (runId !== undefined) (byRun.get(runId) ?? byRun.set(runId, new Map()).get(runId)!).set(tiId, reason);
    }
    // New rows, not changed ones: a step may be deciding from the old read right now.
    for (const [runId, of] of byRun) {
      const read = this.#runs.get(runId)!;
      this.#runs.set(runId, { ...read, tis: read.tis.map((t) => (of.has(t.id) ? { ...t, pending_reason: of.get(t.id)! } : t)) });
    }
  }

  /** A point in this memory's history, for `markCurrent`. */
  now(): number {
    return this.#seq;
  }

  /** An end of this task instance's run is on its way, which the memory may not show. */
  stale(tiId: string): void {
    const runId = this.#runOfTi.get(tiId);
    if (runId !== undefined) this.#changed(runId);
  }

  /**
   * This run's memory is current: a plan decided from it at `since` (`now()`), which assumed the
   * ends then on their way, has just applied, so the database checked every state the plan
   * assumed and made every move the memory now shows. Unless the run changed in any other way
   * since (`stale`, `forget`), the step that follows those ends may decide from the memory
   * instead of reading the run (`takeCurrent`).
   */
  markCurrent(runId: string, since: number): void {
    if (this.#runs.has(runId) && since >= this.#floor && (this.#changedAt.get(runId) ?? 0) <= since) this.#current.add(runId);
  }

  /** Of these runs, the ones whose memory is current, as reads (each taken once). */
  takeCurrent(runIds: readonly string[]): Map<string, RunRead> {
    const out = new Map<string, RunRead>();
    for (const id of runIds) {
      if (!this.#current.delete(id)) continue;
      const read = this.#runs.get(id);
      if (read) out.set(id, read);
    }
    return out;
  }

  #changed(runId: string): void {
    this.#current.delete(runId);
    this.#changedAt.set(runId, ++this.#seq);
    // A mark matters only to plans on their way: past the bound, refuse every plan so far instead.
    if (this.#changedAt.size > MAX_KNOWN) {
      this.#changedAt.clear();
      this.#floor = this.#seq;
    }
  }

  /**
   * This run was ended in the round trip of its last attempt's end (plan.ts, `planAhead`): the
   * step that follows that end has nothing to read or decide for it, only the room it made in
   * its DAG (`takeEnded`).
   */
  endedAhead(runId: string, dagId: string): void {
    this.#drop(runId);
    this.#endedAhead.set(runId, dagId);
    while (this.#endedAhead.size > MAX_KNOWN) this.#endedAhead.delete(this.#endedAhead.keys().next().value!);
  }

  /** Of these runs, the ones ended ahead (run id → DAG id), no longer kept here. */
  takeEnded(runIds: readonly string[]): Map<string, string> {
    const out = new Map<string, string>();
    for (const id of runIds) {
      const dagId = this.#endedAhead.get(id);
      if (dagId === undefined) continue;
      this.#endedAhead.delete(id);
      out.set(id, dagId);
    }
    return out;
  }

  get size(): number {
    return this.#runs.size;
  }

  /** Drops the memory of a run (a remembered run is not current until `markCurrent` says so). */
  #drop(runId: string): void {
    this.#current.delete(runId);
    const read = this.#runs.get(runId);
    if (!read) return;
    this.#runs.delete(runId);
    for (const ti of read.tis) this.#runOfTi.delete(ti.id);
  }
}
