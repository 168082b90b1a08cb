import type { Logger } from 'pino';

/**
 * What a step plans: every active run that may have something to decide (`asked`: a nudge asked
 * for it, e.g. an agent connected, so every task waiting to be offered is read too), or only the
 * runs named by the nudges since the last step (a TI of theirs ended, they were triggered) and the
 * oldest queued runs, at least `queued` of them (an executor has that many free slots and nothing
 * to put in them). A targeted step reads and writes only those runs, so a finished task costs one
 * run's reads, not every active run's.
 */
export type StepTarget = { all: true; asked?: boolean } | { all: false; runIds: string[]; queued: number };

export interface SchedulerLoopOptions {
  tickMs: number;
  logger: Logger;
  /**
   * Runs one step; must not throw (step() never does), but a throw is still caught here.
   * `full` at least once per tick (every phase, every run); `light` for a nudge in between
   * (planning only: the reapers and the cron check are about time passing, which the tick covers).
   */
  step(kind: 'full' | 'light', target: StepTarget): Promise<unknown>;
  /** Whether this replica may step now (it holds the leader lock). */
  canStep(): boolean;
  onStepDone?(seconds: number): void;
}

export interface SchedulerLoop {
  start(): void;
  /**
   * Asks for a step as soon as possible, for these runs only, or for every run when none are
   * named. A burst of nudges costs one step (coalesced, the named runs merged).
   */
  nudge(runIds?: readonly string[]): void;
  /** Asks for a step that starts the oldest queued runs, at least `atLeast` of them (coalesced
   *  with the other nudges: the largest ask wins). */
  nudgeQueued(atLeast: number): void;
  /** Asks for a step at a given time (the earliest request wins; the tick still runs). */
  wakeAt(at: Date): void;
  /** Stops after the step in progress, if any. */
  stop(): Promise<void>;
  /**
   * When the loop last made progress (began a turn, or ended a step), and since when a step has
   * been in progress (null: none): a liveness probe tells a stuck loop by these. And when the
   * last full step began (null: none yet), for how late it is.
   */
  progress(): { at: number; stepSince: number | null; lastFullAt: number | null };
}

/** How much later than the tick the next full step is by `now`, after one began at `lastFullAt` (0: on time). */
export function fullStepLateMs(lastFullAt: number, tickMs: number, now = Date.now()): number {
  return Math.max(0, Math.round(now - lastFullAt - tickMs));
}

/**
 * The one loop that runs the phases: a step every tick as the safety net, and at once when
 * nudged (a TI finished, a run was triggered). Never two steps at the same time.
 */
export class TickAndNudgeLoop implements SchedulerLoop {
  readonly #opts: SchedulerLoopOptions;
  #running = false;
  #stepping: Promise<void> | null = null;
  #pending = false;
  #timer: { cancel(): void } | null = null;
  #wake: { at: number; timer: NodeJS.Timeout } | null = null;
  #lastFullAt = 0;
  #progressAt = Date.now();
  #stepSince: number | null = null;
  // What the nudges since the last step asked for.
  #wantAll = false;
  #wantRuns = new Set<string>();
  #wantQueued = 0;

  constructor(opts: SchedulerLoopOptions) {
    this.#opts = opts;
  }

  start(): void {
    if (this.#running) return;
    this.#running = true;
    this.#wantAll = true;
    this.#schedule(0);
  }

  nudge(runIds?: readonly string[]): void {
    this.#nudge(runIds);
  }

  nudgeQueued(atLeast: number): void {
    this.#nudge(undefined, Math.max(1, atLeast));
  }

  wakeAt(at: Date): void {
    const ms = at.getTime() - Date.now();
    if (!this.#running || ms >= this.#opts.tickMs) return; // the tick comes first anyway
    if (this.#wake && this.#wake.at <= at.getTime()) return;
    if (this.#wake) clearTimeout(this.#wake.timer);
    this.#wake = {
      at: at.getTime(),
      timer: setTimeout(
        () => {
          this.#wake = null;
          this.#nudge();
        },
        Math.max(0, ms),
      ),
    };
  }

  progress(): { at: number; stepSince: number | null; lastFullAt: number | null } {
    return {
      at: this.#progressAt,
      stepSince: this.#stepSince,
      lastFullAt: this.#lastFullAt === 0 ? null : this.#lastFullAt,
    };
  }

  async stop(): Promise<void> {
    this.#running = false;
    if (this.#wake) clearTimeout(this.#wake.timer);
    this.#wake = null;
    this.#timer?.cancel();
    this.#timer = null;
    await this.#stepping;
  }

  #schedule(delayMs: number): void {
    if (!this.#running) return;
    this.#timer?.cancel();
    // A nudge steps on the next turn of the event loop (setTimeout(0) would wait a millisecond).
    if (delayMs === 0) {
      const h = setImmediate(() => void this.#runStep());
      this.#timer = { cancel: () => clearImmediate(h) };
    } else {
      const h = setTimeout(() => void this.#runStep(), delayMs);
      this.#timer = { cancel: () => clearTimeout(h) };
    }
  }

  async #runStep(): Promise<void> {
    const opts = this.#opts;
    this.#timer = null;
    if (!this.#running) return;
    this.#progressAt = Date.now();
    if (this.#stepping) {
      this.#pending = true;
      return;
    }
    this.#pending = false;
    if (opts.canStep()) {
      const started = performance.now();
      const [kind, target] = this.#nextStep();
      this.#stepSince = Date.now();
      this.#stepping = opts
        .step(kind, target)
        .catch((err: unknown) => opts.logger.error({ err }, 'scheduler step threw'))
        .then(() => opts.onStepDone?.((performance.now() - started) / 1000));
      await this.#stepping;
      this.#stepping = null;
      this.#stepSince = null;
      this.#progressAt = Date.now();
    } else {
      this.#wantAll = false;
      this.#wantRuns = new Set();
      this.#wantQueued = 0;
    }
    this.#schedule(this.#pending ? 0 : opts.tickMs);
  }

  /** The kind and target of the step to run now, from what the nudges since the last one asked. */
  #nextStep(): ['full' | 'light', StepTarget] {
    // However many nudges keep coming, a full step still happens once per tick.
    const kind = Date.now() - this.#lastFullAt >= this.#opts.tickMs ? 'full' : 'light';
    if (kind === 'full') this.#lastFullAt = Date.now();
    const named = this.#wantRuns.size > 0 || this.#wantQueued > 0;
    const target: StepTarget =
      kind === 'full' || this.#wantAll || !named
        ? { all: true, asked: this.#wantAll }
        : { all: false, runIds: [...this.#wantRuns], queued: this.#wantQueued };
    this.#wantAll = false;
    // A step of everything reads the runs with work waiting and the sweep's stretch, not
    // necessarily the runs named: they stay wanted, for a step right after this one.
    if (target.all && named) this.#pending = true;
    else {
      this.#wantRuns = new Set();
      this.#wantQueued = 0;
    }
    return [kind, target];
  }

  #nudge(runIds?: readonly string[], queued = 0): void {
    if (!this.#running) return;
    if (queued > 0) this.#wantQueued = Math.max(this.#wantQueued, queued);
    else if (runIds && runIds.length > 0) for (const id of runIds) this.#wantRuns.add(id);
    else this.#wantAll = true;
    if (this.#stepping) this.#pending = true;
    else if (!this.#timer || this.#pending === false) {
      this.#pending = true;
      this.#schedule(0);
    }
  }
}

export function createSchedulerLoop(opts: SchedulerLoopOptions): SchedulerLoop {
  return new TickAndNudgeLoop(opts);
}
