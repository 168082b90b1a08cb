import { activeRuns, type ActiveRunRow } from '../db/runs.js';
import type { Sql } from '../db/sql.js';
import { listTisOfRunsOfTis, type PlannerTi } from '../db/tis.js';

/** One run as the planner reads it: the run and its task instances. */
export interface RunRead {
  run: ActiveRunRow;
  tis: PlannerTi[];
}

/** Beyond this many runs of one kind, the ones kept longest ago are dropped. */
const MAX_RUNS = 10_000;

/**
 * What the leader's planner holds of runs between steps, so that it need not read them first: reads
 * sent behind ends, what it last knew of each running run, and runs ended ahead. All of it is a
 * hint, never truth: every planner write is guarded by the run's plan epoch and the states it
 * assumed (db/plan/apply-plans.ts), so a stale hint costs a plan that does not apply, never a wrong move.
 */
export class PlannerMemory {
  /** One history for the whole memory: every event that may outdate something takes a number. */
  #seq = 0;

  /** Reads kept for their run's next step, each with the point it was sent at. */
  #reads = new Map<string, { seq: number; read: RunRead }>();
  /** When each run last changed in a way no read sent before shows (reads on their way are refused). */
  #readsChangedAt = new Map<string, number>();
  /** Reads sent at or before this are not kept (every run changed since). */
  #readsFloor = 0;

  /** What the planner last knew of each running run. */
  #known = new Map<string, RunRead>();
  #runOfTi = new Map<string, string>();
  /** Runs whose known state is what the database holds now, as far as planning goes (`markCurrent`). */
  #current = new Set<string>();
  /** When each run last changed in a way its known state may not show (an end on its way, a forget). */
  #knownChangedAt = new Map<string, number>();
  /** Every run's known state changed at or before this (it was all forgotten). */
  #knownFloor = 0;
  /** Runs ended ahead of their step (their DAG by run id), until a step takes them. */
  #endedAhead = new Map<string, string>();

  /** @param readLimit at most this many runs are read behind one batch of ends. */
  constructor(private readonly readLimit: number) {}

  // News from outside the planner.

  /**
   * These runs changed in a way nothing held here shows (every run, when none are named): their
   * reads and what was known of them are dropped, and reads and plans of them still on their way
   * will not be kept or count as current. News of a run from anywhere but the planner's own
   * bookkeeping (a trigger, a clear, a cancel, another replica) comes through here.
   */
  changed(runIds?: readonly string[]): void {
    if (!runIds || runIds.length === 0) return this.clear();
    const seq = ++this.#seq;
    for (const id of runIds) {
      this.#reads.delete(id);
      this.#markReadChanged(id, seq);
      this.#dropKnown(id);
      this.#markKnownChanged(id, seq);
    }
  }

  /** Forgets everything (this replica stopped leading): nothing on its way is kept either. */
  clear(): void {
    const seq = ++this.#seq;
    this.#reads.clear();
    this.#readsChangedAt.clear();
    this.#readsFloor = seq;
    this.#known.clear();
    this.#runOfTi.clear();
    this.#current.clear();
    this.#knownChangedAt.clear();
    this.#endedAhead.clear();
    this.#knownFloor = seq;
  }

  // Reads for a run's next step.

  /**
   * Sends the reads of the runs of these TIs on `on` at once, before this returns (so they are
   * pipelined behind whatever was `execute()`d on it just before, the report batcher's ends:
   * Postgres runs them after it, so they see the ends), and keeps them once they answer. Never
   * rejects: a failed read is only a read not kept.
   */
  async readBehindEnds(on: Sql, tiIds: string[]): Promise<void> {
    if (tiIds.length === 0) return;
    const seq = ++this.#seq;
    // execute() queues each query for sending in call order; awaiting alone would send them only
    // once something calls then(), after queries queued since.
    const runsQ = activeRuns(on, this.readLimit, { ofTis: tiIds }).execute();
    const tisQ = listTisOfRunsOfTis(on, tiIds).execute();
    let runs: ActiveRunRow[];
    let tis: PlannerTi[];
    try {
      [runs, tis] = await Promise.all([runsQ, tisQ]);
    } catch {
      return;
    }
    const byRun = new Map<string, PlannerTi[]>();
    for (const ti of tis) (byRun.get(ti.run_id) ?? byRun.set(ti.run_id, []).get(ti.run_id)!).push(ti);
    if (seq <= this.#readsFloor) return;
    for (const run of runs) {
      if ((this.#readsChangedAt.get(run.id) ?? 0) > seq) continue;
      const kept = this.#reads.get(run.id);
      if (kept && kept.seq > seq) continue;
      this.#reads.delete(run.id);
      this.#reads.set(run.id, { seq, read: { run, tis: byRun.get(run.id) ?? [] } });
    }
    while (this.#reads.size > MAX_RUNS) this.#reads.delete(this.#reads.keys().next().value!);
  }

  /** A run read just now some other way (as created): everything held of it before is dropped. */
  keepRead(read: RunRead): void {
    this.changed([read.run.id]);
    this.#reads.set(read.run.id, { seq: ++this.#seq, read });
    while (this.#reads.size > MAX_RUNS) this.#reads.delete(this.#reads.keys().next().value!);
  }

  /** The reads kept of these runs, no longer kept; runs without one are not in the map. */
  takeReads(runIds: readonly string[]): Map<string, RunRead> {
    const out = new Map<string, RunRead>();
    for (const id of runIds) {
      const kept = this.#reads.get(id);
      if (!kept) continue;
      this.#reads.delete(id);
      out.set(id, kept.read);
    }
    return out;
  }

  /**
   * The step will not use a read of these runs (every run, when none are named) kept now or on its
   * way: it reads them all itself, or they end ahead. What is known of them stays.
   */
  dropReads(runIds?: readonly string[]): void {
    const seq = ++this.#seq;
    if (!runIds || runIds.length === 0) {
      this.#reads.clear();
      this.#readsChangedAt.clear();
      this.#readsFloor = seq;
      return;
    }
    for (const id of runIds) {
      this.#reads.delete(id);
      this.#markReadChanged(id, seq);
    }
  }

  /** How many reads are kept. */
  get readsKept(): number {
    return this.#reads.size;
  }

  // What the planner knew of running runs.

  /** The run and task instances as they are now, as far as this replica's planner knows. */
  remember(read: RunRead): void {
    this.#dropKnown(read.run.id);
    this.#known.set(read.run.id, read);
    for (const ti of read.tis) this.#runOfTi.set(ti.id, read.run.id);
    while (this.#known.size > MAX_RUNS) this.#dropKnown(this.#known.keys().next().value!);
  }

  /** What is known of the run this task instance belongs to. */
  ofTi(tiId: string): RunRead | undefined {
    const runId = this.#runOfTi.get(tiId);
    return runId === undefined ? undefined : this.#known.get(runId);
  }

  /**
   * What was known of these runs proved wrong (a plan from it did not apply) or has no more use
   * (the run ends): it is forgotten. Reads of them taken from the database are kept.
   */
  forget(runIds: readonly string[]): void {
    for (const id of runIds) {
      this.#dropKnown(id);
      this.#markKnownChanged(id, ++this.#seq);
    }
  }

  /** Why these task instances wait, as just written (null: no reason), where known. */
  noteReasons(reasons: ReadonlyMap<string, string | null>): void {
    const byRun = new Map<string, Map<string, string | null>>();
    for (const [tiId, reason] of reasons) {
      const runId = this.#runOfTi.get(tiId);
      if (runId !== undefined) (byRun.get(runId) ?? byRun.set(runId, new Map()).get(runId)!).set(tiId, reason);
    }
    // New rows, not changed ones: a step may be deciding from the old read right now.
    for (const [runId, of] of byRun) {
      const read = this.#known.get(runId)!;
      this.#known.set(runId, {
        ...read,
        tis: read.tis.map((t) => (of.has(t.id) ? { ...t, pending_reason: of.get(t.id)! } : t)),
      });
    }
  }

  // Ends in flight, and when what is known is current.

  /**
   * Ends of these task instances are on their way, which what is known of their runs does not
   * show: not current until a plan that assumed them applies. Returns the point a plan decided now
   * starts from, for `markCurrent`.
   */
  noteEndsInFlight(tiIds: Iterable<string>): number {
    for (const tiId of tiIds) {
      const runId = this.#runOfTi.get(tiId);
      if (runId !== undefined) this.#markKnownChanged(runId, ++this.#seq);
    }
    return this.#seq;
  }

  /**
   * What is known of this run is current: a plan decided from it at `since` (`noteEndsInFlight`),
   * which assumed the ends then on their way, has just applied, so the database checked every
   * state the plan assumed and made every move now known. Unless the run changed in any other way
   * since (another end, `forget`, `changed`), the step that follows those ends may decide from it
   * instead of reading the run (`takeCurrentReads`).
   */
  markCurrent(runId: string, since: number): void {
    if (this.#known.has(runId) && since >= this.#knownFloor && (this.#knownChangedAt.get(runId) ?? 0) <= since)
      this.#current.add(runId);
  }

  /** Of these runs, the ones whose known state is current, as reads (each taken once). */
  takeCurrentReads(runIds: readonly string[]): Map<string, RunRead> {
    const out = new Map<string, RunRead>();
    for (const id of runIds) {
      if (!this.#current.delete(id)) continue;
      const read = this.#known.get(id);
      if (read) out.set(id, read);
    }
    return out;
  }

  // Runs ended ahead.

  /**
   * This run was ended in the round trip of its last attempt's end (plan-ahead.ts): the step that
   * follows that end has nothing to read or decide for it, only the room it made in its DAG
   * (`takeEndedAhead`).
   */
  recordEndedAhead(runId: string, dagId: string): void {
    this.#dropKnown(runId);
    this.#endedAhead.set(runId, dagId);
    while (this.#endedAhead.size > MAX_RUNS) this.#endedAhead.delete(this.#endedAhead.keys().next().value!);
  }

  /** Of these runs, the ones ended ahead (run id → DAG id), no longer kept here. */
  takeEndedAhead(runIds: readonly string[]): Map<string, string> {
    const out = new Map<string, string>();
    for (const id of runIds) {
      const dagId = this.#endedAhead.get(id);
      if (dagId === undefined) continue;
      this.#endedAhead.delete(id);
      out.set(id, dagId);
    }
    return out;
  }

  /** Drops what is known of a run (a known run is not current until `markCurrent` says so). */
  #dropKnown(runId: string): void {
    this.#current.delete(runId);
    const read = this.#known.get(runId);
    if (!read) return;
    this.#known.delete(runId);
    for (const ti of read.tis) this.#runOfTi.delete(ti.id);
  }

  // A change mark matters only to what was on its way when it was made: past the bound, the marks
  // are forgotten and everything sent so far is refused instead.

  #markReadChanged(runId: string, seq: number): void {
    this.#readsChangedAt.set(runId, seq);
    if (this.#readsChangedAt.size > MAX_RUNS) {
      this.#readsChangedAt.clear();
      this.#readsFloor = seq;
    }
  }

  /** Also ends the run's currency: what is known of it is not current until marked again. */
  #markKnownChanged(runId: string, seq: number): void {
    this.#current.delete(runId);
    this.#knownChangedAt.set(runId, seq);
    if (this.#knownChangedAt.size > MAX_RUNS) {
      this.#knownChangedAt.clear();
      this.#knownFloor = seq;
    }
  }
}
