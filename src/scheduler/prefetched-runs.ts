import { activeRuns, type ActiveRunRow } from '../db/runs.js';
import type { Sql } from '../db/sql.js';
import { listTisOfRunsOfTis, type TiRow } from '../db/tis.js';

/** One run as the planner reads it: the run and its task instances. */
export interface RunRead {
  run: ActiveRunRow;
  tis: TiRow[];
}

/** Beyond this many runs read ahead and not yet stepped, the oldest reads are dropped. */
const MAX_KEPT = 10_000;

/**
 * Reads of runs taken ahead of their step, so the step that follows a task's end need not read
 * them again: the report batcher sends them on its connection right behind the ends it writes
 * (Postgres runs them in that order, so they see those ends), in the same round trip.
 *
 * A read is used only while nothing else is known to have changed its run since it was sent: a
 * nudge for any other reason (a trigger, a clear, a cancel, another replica's news) marks the run
 * changed, and the step then reads it as before. A step over every run reads everything and drops
 * what is kept. Using a read that is out of date would still be safe (every planner write is
 * guarded by the run's plan epoch and each task's state), only late.
 */
export class PrefetchedRuns {
  #seq = 0;
  #reads = new Map<string, { seq: number; read: RunRead }>();
  #changedAt = new Map<string, number>();
  /** Reads sent at or before this are not kept (everything changed since). */
  #floor = 0;

  constructor(private readonly limit: number) {}

  /**
   * Sends the reads of the runs of these TIs on `on` at once, before this returns (so they are
   * pipelined behind whatever was `execute()`d on it just before: Postgres runs them after it),
   * and keeps them once they answer. Never rejects: a failed read is only a read not kept.
   */
  async readAfter(on: Sql, tiIds: string[]): Promise<void> {
    if (tiIds.length === 0) return;
    const seq = ++this.#seq;
    // execute() queues each query for sending in call order; awaiting alone would send them only
    // once something calls then(), after queries queued since.
    const runsQ = activeRuns(on, this.limit, { ofTis: tiIds }).execute();
    const tisQ = listTisOfRunsOfTis(on, tiIds).execute();
    let runs: ActiveRunRow[];
    let tis: TiRow[];
    try {
      [runs, tis] = await Promise.all([runsQ, tisQ]);
    } catch {
      return;
    }
    const byRun = new Map<string, TiRow[]>();
    for (const ti of tis) (byRun.get(ti.run_id) ?? byRun.set(ti.run_id, []).get(ti.run_id)!).push(ti);
    if (seq <= this.#floor) return;
    for (const run of runs) {
      if ((this.#changedAt.get(run.id) ?? 0) > seq) continue;
      const kept = this.#reads.get(run.id);
      if (kept && kept.seq > seq) continue;
      this.#reads.delete(run.id);
      this.#reads.set(run.id, { seq, read: { run, tis: byRun.get(run.id) ?? [] } });
    }
    while (this.#reads.size > MAX_KEPT) this.#reads.delete(this.#reads.keys().next().value!);
  }

  /** Keeps a read taken just now some other way (a run as created), for its step. */
  keep(read: RunRead): void {
    this.changed([read.run.id]);
    this.#reads.set(read.run.id, { seq: ++this.#seq, read });
    while (this.#reads.size > MAX_KEPT) this.#reads.delete(this.#reads.keys().next().value!);
  }

  /** These runs changed in a way no kept read shows (every run, when none are named). */
  changed(runIds?: readonly string[]): void {
    if (!runIds || runIds.length === 0) return this.clear();
    const seq = ++this.#seq;
    for (const id of runIds) {
      this.#reads.delete(id);
      this.#changedAt.set(id, seq);
    }
    // A mark matters only to the reads in flight when it was made: past the bound, forget the
    // marks and refuse every read sent so far instead.
    if (this.#changedAt.size > MAX_KEPT) {
      this.#changedAt.clear();
      this.#floor = seq;
    }
  }

  /** The kept reads of these runs, removed from the store; runs without one are not in the map. */
  take(runIds: readonly string[]): Map<string, RunRead> {
    const out = new Map<string, RunRead>();
    for (const id of runIds) {
      const kept = this.#reads.get(id);
      if (!kept) continue;
      this.#reads.delete(id);
      out.set(id, kept.read);
    }
    return out;
  }

  /** Drops every kept read (a step over every run reads them all, or this replica stopped leading). */
  clear(): void {
    this.#reads.clear();
    this.#changedAt.clear();
    this.#floor = ++this.#seq;
  }

  get size(): number {
    return this.#reads.size;
  }
}
