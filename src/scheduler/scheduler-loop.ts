import type { Logger } from 'pino';

/**
 * What a step plans: every active run that may have something to decide (`asked`: a nudge asked
 * for it, e.g. an agent connected, so every task waiting to be offered is read too), or only the
 * runs named by the nudges since the last step
 * (a TI of theirs ended, they were triggered) and the oldest queued runs, at least `queued` of
 * them (an executor has that many free slots and nothing to put in them). A targeted step reads and writes only those runs, so a
 * finished task costs one run's reads, not every active run's.
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
export function createSchedulerLoop(opts: SchedulerLoopOptions): SchedulerLoop {
  let running = false;
  let stepping: Promise<void> | null = null;
  let pending = false;
  let timer: { cancel(): void } | null = null;
  let wake: { at: number; timer: NodeJS.Timeout } | null = null;
  let lastFullAt = 0;
  let progressAt = Date.now();
  let stepSince: number | null = null;
  // What the nudges since the last step asked for.
  let wantAll = false;
  let wantRuns = new Set<string>();
  let wantQueued = 0;

  const schedule = (delayMs: number) => {
    if (!running) return;
    timer?.cancel();
    // A nudge steps on the next turn of the event loop (setTimeout(0) would wait a millisecond).
    if (delayMs === 0) {
      const h = setImmediate(() => void runStep());
      timer = { cancel: () => clearImmediate(h) };
    } else {
      const h = setTimeout(() => void runStep(), delayMs);
      timer = { cancel: () => clearTimeout(h) };
    }
  };

  const runStep = async () => {
    timer = null;
    if (!running) return;
    progressAt = Date.now();
    if (stepping) {
      pending = true;
      return;
    }
    pending = false;
    if (opts.canStep()) {
      const started = performance.now();
      // However many nudges keep coming, a full step still happens once per tick.
      const kind = Date.now() - lastFullAt >= opts.tickMs ? 'full' : 'light';
      if (kind === 'full') lastFullAt = Date.now();
      const named = wantRuns.size > 0 || wantQueued > 0;
      const target: StepTarget =
        kind === 'full' || wantAll || !named
          ? { all: true, asked: wantAll }
          : { all: false, runIds: [...wantRuns], queued: wantQueued };
      wantAll = false;
      // A step of everything reads the runs with work waiting and the sweep's stretch, not
      // necessarily the runs named: they stay wanted, for a step right after this one.
      if (target.all && named) pending = true;
      else {
        wantRuns = new Set();
        wantQueued = 0;
      }
      stepSince = Date.now();
      stepping = opts
        .step(kind, target)
        .catch((err: unknown) => opts.logger.error({ err }, 'scheduler step threw'))
        .then(() => opts.onStepDone?.((performance.now() - started) / 1000));
      await stepping;
      stepping = null;
      stepSince = null;
      progressAt = Date.now();
    } else {
      wantAll = false;
      wantRuns = new Set();
      wantQueued = 0;
    }
    schedule(pending ? 0 : opts.tickMs);
  };

  const nudge = (runIds?: readonly string[], queued = 0) => {
    if (!running) return;
    if (queued > 0) wantQueued = Math.max(wantQueued, queued);
    else if (runIds && runIds.length > 0) for (const id of runIds) wantRuns.add(id);
    else wantAll = true;
    if (stepping) pending = true;
    else if (!timer || pending === false) {
      pending = true;
      schedule(0);
    }
  };

  return {
    start() {
      if (running) return;
      running = true;
      wantAll = true;
      schedule(0);
    },
    nudge: (runIds) => nudge(runIds),
    nudgeQueued: (atLeast) => nudge(undefined, Math.max(1, atLeast)),
    wakeAt(at) {
      const ms = at.getTime() - Date.now();
      if (!running || ms >= opts.tickMs) return; // the tick comes first anyway
      if (wake && wake.at <= at.getTime()) return;
      if (wake) clearTimeout(wake.timer);
      wake = {
        at: at.getTime(),
        timer: setTimeout(
          () => {
            wake = null;
            nudge();
          },
          Math.max(0, ms),
        ),
      };
    },
    progress: () => ({ at: progressAt, stepSince, lastFullAt: lastFullAt === 0 ? null : lastFullAt }),
    async stop() {
      running = false;
      if (wake) clearTimeout(wake.timer);
      wake = null;
      timer?.cancel();
      timer = null;
      await stepping;
    },
  };
}
