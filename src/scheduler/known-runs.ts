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
      return;
    }
    for (const id of runIds) this.#drop(id);
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

  #drop(runId: string): void {
    const read = this.#runs.get(runId);
    if (!read) return;
    this.#runs.delete(runId);
    for (const ti of read.tis) this.#runOfTi.delete(ti.id);
  }
}
