import path from 'node:path';
import type { Logger } from 'pino';
import type { Attempt, AttemptReporter, AttemptResult, Executor, LogStream } from '../executor.js';
import { AttemptDir, type ExitStatus } from '../process/attempt-dir.js';
import { killOrphans } from '../process/orphans.js';
import { ReadyShells } from '../process/ready-shell.js';
import { shellQuote } from '../process/shim.js';
import { ShimProcess, type StartedHow } from '../process/shim-process.js';
import { SpawnHelper } from '../process/spawn-helper.js';

export interface SubprocessExecutorOptions {
  reporter: AttemptReporter;
  logger: Logger;
  /** Where each attempt's shim keeps its output and exit status (`<state dir>/attempts`). */
  attemptsDir: string;
  /** Time between SIGTERM and SIGKILL when an attempt is stopped, unless it names its own. */
  killGraceMs: number;
  heartbeatIntervalMs: number;
  /**
   * Keep a shim's shell ready for the next lone start (ready-shell.ts): ~1–2 ms sooner, with the
   * fork off its way. Default true; the shell is /bin/sh unless `readyShell` names another.
   */
  readyShell?: boolean | string;
  /**
   * Start shims through a small shell that forks them (spawn-helper.ts) when no ready shell
   * serves the start, instead of a `spawn()` that forks this whole process. Default true (where
   * `setsid` is on the PATH).
   */
  spawnHelper?: boolean;
  /** Told how each attempt's process was started (for metrics and tests). */
  onStart?(how: StartedHow): void;
}

export const SHUTDOWN_ERROR = 'control plane shut down before the task ended';

/** An attempt still running this long after its start has the next ready shell made meanwhile. */
const REFILL_WHILE_RUNNING_MS = 5;

type Outcome = AttemptResult['outcome'];

/** Why and how we are ending a process; the first decision wins, a later one can only hasten it. */
interface StopRequest {
  outcome: Outcome;
  error: string;
  /** The system log line, when it should say more than `error`. */
  note?: string;
  signal: 'SIGTERM' | 'SIGKILL';
}

/** One attempt from dispatch until its process is over (exited and its output read). */
interface Running {
  attempt: Attempt;
  process: ShimProcess | null;
  /** Its folder in the attempts folder, removed once its end is recorded. */
  dir: AttemptDir | null;
  /** Settles when `started` has, so `finished` never overtakes it in the store. */
  startedReport: Deferred;
  /** Heartbeats are sent only after `started`, or the store could not yet know the attempt. */
  startSettled: boolean;
  /** How the task ended; null while it runs. */
  exit: ExitStatus | null;
  stop: StopRequest | null;
  killSent: boolean;
  timeoutTimer: NodeJS.Timeout | null;
  graceTimer: NodeJS.Timeout | null;
  /** Set once the process is over; from then on only its `finished` report is pending. */
  over: boolean;
  /** Settles when `finished` has been reported (or its failure logged). */
  done: Deferred;
}

interface Deferred {
  promise: Promise<void>;
  resolve: () => void;
}

/** What `adopt` found in the attempts folder after a restart. */
export interface Adopted {
  /** Still running under their shim: supervised here again, as the same try. */
  reattached: number;
  /** Ended while no one watched: their real outcome recorded now. */
  recorded: number;
  /** Attempts no one could re-attach to whose task processes were found running, and killed. */
  killed: number;
}

/**
 * Runs each attempt under a shim (process/shim.ts), a supervisor of its own process group that
 * outlives this process (Lite edition, and each agent). The task's liveness is its heartbeat, so
 * there is no per-task agent to start; the store's answer to the heartbeat is how an attempt
 * learns it was superseded, reaped or cancelled elsewhere. After a crash or a restart, `adopt`
 * re-attaches to the shims left running and records the real outcome of those that ended.
 */
export function createSubprocessExecutor(opts: SubprocessExecutorOptions): SubprocessExecutor {
  return new SubprocessExecutor(opts);
}

// Longer than our files usually are: an attempt's whole life here (start, output, exit, stop,
// heartbeat, adoption) is one state machine over `Running`, and it reads best in one place. The
// process half (the shim, its files, re-attaching) is in process/.
export class SubprocessExecutor implements Executor {
  readonly kind = 'subprocess';
  readonly #reporter: AttemptReporter;
  readonly #logger: Logger;
  readonly #root: string;
  readonly #killGraceMs: number;
  readonly #heartbeatIntervalMs: number;
  /** Attempts whose process may still be running, by ti id. */
  readonly #live = new Map<string, Running>();
  /** `finished` reports in flight; shutdown waits for them. */
  readonly #reporting = new Set<Running>();
  #shutdown: Promise<void> | null = null;
  #heartbeatTimer: NodeJS.Timeout | null = null;
  #heartbeatInFlight: Promise<void> | null = null;
  readonly #shells: ReadyShells;
  readonly #helper: SpawnHelper | null;
  readonly #keepReady: boolean;
  readonly #onStart: SubprocessExecutorOptions['onStart'];

  constructor(opts: SubprocessExecutorOptions) {
    const shell = opts.readyShell ?? true;
    this.#shells = new ReadyShells({ logger: opts.logger, ...(typeof shell === 'string' ? { shell } : {}) });
    this.#keepReady = shell !== false;
    this.#helper = opts.spawnHelper === false ? null : new SpawnHelper({ logger: opts.logger });
    this.#onStart = opts.onStart;
    this.#reporter = opts.reporter;
    this.#logger = opts.logger;
    this.#root = path.resolve(opts.attemptsDir);
    this.#killGraceMs = opts.killGraceMs;
    this.#heartbeatIntervalMs = opts.heartbeatIntervalMs;
  }

  get activeCount(): number {
    return this.#live.size;
  }

  /** Whether this attempt's process is alive here: a positive sign of life no reaper may ignore. */
  holdsLive(tiId: string, attemptToken: string): boolean {
    const run = this.#live.get(tiId);
    return run !== undefined && run.attempt.attemptToken === attemptToken && !run.over;
  }

  async dispatch(attempt: Attempt): Promise<void> {
    if (this.#shutdown) throw new Error(`subprocess executor is shutting down: not starting ${attempt.tiId}`);
    const stale = this.#live.get(attempt.tiId);
    if (stale && stale.attempt.tryNumber < attempt.tryNumber) {
      // An older attempt of this TI still runs here: it was declared lost (e.g. heartbeats could
      // not be written) and a new try was claimed. Stop the old one first, so two attempts of a
      // task never run at once, then start the new one.
      this.#logger.warn({ tiId: attempt.tiId, tryNumber: attempt.tryNumber, staleTry: stale.attempt.tryNumber }, 'stopping a superseded attempt before starting the new try');
      this.#stop(stale, { outcome: 'superseded', error: `superseded by try ${attempt.tryNumber}`, signal: 'SIGTERM' });
      await stale.done.promise;
    }
    const held = this.#live.get(attempt.tiId);
    if (held) {
      // Leader overlap can dispatch twice; the deterministic dispatch key collapses onto this process.
      this.#logger.warn(
        { tiId: attempt.tiId, tryNumber: attempt.tryNumber, heldTryNumber: held.attempt.tryNumber },
        'duplicate dispatch ignored: attempt already running here',
      );
      return;
    }
    const run = this.#track(attempt, null);
    let start;
    try {
      start = await this.#startOnlyHere(run);
    } catch (err) {
      start = { ok: false as const, error: `failed to start ${JSON.stringify(attempt.command[0])}: ${errorMessage(err)}` };
    }
    if (!start.ok) {
      run.startedReport.resolve();
      this.#system(run, start.error);
      this.#finish(run, { exitCode: null, signal: null, error: start.error, outcome: 'spawn_failed' });
      await run.done.promise;
      return;
    }
    this.#onStart?.(start.how);
    this.#system(run, `started pid ${start.process.pid}: ${formatCommand(attempt.command)}`);
    this.#supervise(run, start.process);
    try {
      const current = await this.#reporter.started(attempt, { pid: start.process.pid });
      if (!current) {
        this.#stop(run, { outcome: 'superseded', error: 'attempt superseded before it started', signal: 'SIGKILL' });
      }
    } catch (err) {
      // Unknown whether the store recorded it; keep running and let the next heartbeat decide.
      this.#logError(attempt, err, 'reporting started failed; the heartbeat will decide whether it is current');
    } finally {
      run.startSettled = true;
      run.startedReport.resolve();
      this.#scheduleHeartbeat();
    }
    // The next attempt's shell is made while this one runs, if it runs a while (else when it
    // ends): then the fork holds this thread while it would wait anyway (ready-shell.ts).
    setTimeout(() => !run.over && this.#refillShell(1), REFILL_WHILE_RUNNING_MS).unref();
  }

  cancel(tiId: string, reason: string): boolean {
    const run = this.#live.get(tiId);
    if (!run) return false;
    return this.#stop(run, { outcome: 'cancelled', error: reason, note: `cancelled: ${reason}`, signal: 'SIGTERM' });
  }

  /**
   * After a restart, before any new work: re-attaches to every shim still running in the attempts
   * folder and supervises it again as the same try (or stops it, when the store says it is no
   * longer current), records the real outcome of each attempt that ended meanwhile, with its log
   * made whole, and kills the task processes of any attempt whose folder is gone.
   */
  async adopt(): Promise<Adopted> {
    AttemptDir.claimRoot(this.#root);
    const found: Adopted = { reattached: 0, recorded: 0, killed: 0 };
    const kept = new Set<string>();
    for (const dir of AttemptDir.list(this.#root)) {
      const attempt = dir.readAttempt();
      if (attempt === null || this.#live.has(attempt.tiId)) continue;
      kept.add(dir.path);
      try {
        if (await this.#adoptOne(attempt, dir)) found.reattached++;
        else found.recorded++;
      } catch (err) {
        // Left for the next start (or the heartbeat reaper): nothing was recorded wrongly.
        this.#logError(attempt, err, 'could not adopt an attempt left by an earlier process');
      }
    }
    found.killed = new Set(killOrphans(this.#root, kept).map((o) => o.attemptDir)).size;
    if (found.reattached + found.recorded + found.killed > 0) this.#logger.info(found, 'adopted the attempts an earlier process left');
    return found;
  }

  shutdown(waitMs: number): Promise<void> {
    this.#shutdown ??= this.#drainAndStop(waitMs);
    return this.#shutdown;
  }

  async #adoptOne(attempt: Attempt, dir: AttemptDir): Promise<boolean> {
    const skip = await this.#reporter.logsSoFar(attempt);
    const run = this.#track(attempt, null);
    run.dir = dir;
    const onLine = (stream: LogStream, line: string) => this.#log(attempt, stream, line);
    const shim = ShimProcess.reattach(dir, { onLine }, skip);
    if (shim) {
      this.#system(run, `re-attached to pid ${shim.pid} after a restart`);
      this.#supervise(run, shim);
    } else {
      ShimProcess.readRest(dir, { onLine }, skip);
    }
    // Idempotent for an attempt already recorded running; moves one whose start was never
    // recorded. False: it is no longer current (reaped, cancelled or retried meanwhile).
    const current = await this.#reporter.started(attempt, { pid: shim?.pid ?? null });
    run.startSettled = true;
    run.startedReport.resolve();
    if (shim) {
      if (!current) this.#stop(run, { outcome: 'superseded', error: 'attempt no longer current after a restart', signal: 'SIGTERM' });
      this.#scheduleHeartbeat();
      return true;
    }
    const status = dir.readStatus();
    this.#system(run, status ? `ended while no one watched: ${describe(status)}` : 'its supervisor was killed before the task ended: no exit status');
    this.#onExit(run, status);
    return false;
  }

  #track(attempt: Attempt, proc: ShimProcess | null): Running {
    const run: Running = {
      attempt,
      process: proc,
      dir: proc?.dir ?? null,
      startedReport: deferred(),
      startSettled: false,
      exit: null,
      stop: null,
      killSent: false,
      timeoutTimer: null,
      graceTimer: null,
      over: false,
      done: deferred(),
    };
    this.#live.set(attempt.tiId, run);
    return run;
  }

  /** Starts from the ready shell only a lone start (this attempt is the only one live here). */
  #startOnlyHere(run: Running) {
    const onLine = (stream: LogStream, line: string) => this.#log(run.attempt, stream, line);
    return ShimProcess.start(this.#shells, this.#helper, this.#root, run.attempt, { onLine }, { useReady: this.#live.size <= 1 });
  }

  /** The timeout, and the end of the attempt's process. */
  #supervise(run: Running, proc: ShimProcess): void {
    run.process = proc;
    run.dir = proc.dir;
    const { timeoutMs } = run.attempt;
    if (timeoutMs !== null) {
      run.timeoutTimer = setTimeout(() => {
        run.timeoutTimer = null;
        this.#stop(run, { outcome: 'timed_out', error: `timed out after ${timeoutMs} ms`, signal: 'SIGTERM' });
      }, timeoutMs);
    }
    void proc.ended.then(
      (status) => this.#onExit(run, status),
      (err) => {
        this.#logError(run.attempt, err, 'watching the task failed');
        this.#onExit(run, null);
      },
    );
  }

  async #drainAndStop(waitMs: number): Promise<void> {
    // Dispatch refuses from here on, so this snapshot holds every attempt there will be.
    const all = Promise.all([...this.#live.values(), ...this.#reporting].map((r) => r.done.promise));
    let limit: NodeJS.Timeout | undefined;
    this.#shells.close();
    await Promise.race([all, new Promise<void>((resolve) => (limit = setTimeout(resolve, waitMs)))]);
    clearTimeout(limit);
    for (const run of this.#live.values()) {
      this.#stop(run, { outcome: 'failed', error: SHUTDOWN_ERROR, signal: 'SIGTERM' });
    }
    await all;
    this.#helper?.close();
    if (this.#heartbeatTimer) clearTimeout(this.#heartbeatTimer);
    this.#heartbeatTimer = null;
    await this.#heartbeatInFlight;
  }

  /**
   * Makes the next ready shell while this executor runs at most one attempt. A ready shell is for
   * the latency of a lone start (a chain's next task), and only such a start takes it. Busier,
   * each start makes its own: a ready shell's fork would hold up the other attempts' exits.
   * `maxLive`: how many attempts may be live now, this one included while it runs. With the spawn
   * helper, a busy start costs this thread little, so a shell is made at an end only when none is
   * left live (under load, such forks were most of what starts cost); when the fork comes, the
   * next lone start may have begun meanwhile (a chain's next task): the shell is for the one after.
   */
  #refillShell(maxLive: number): void {
    if (this.#keepReady && this.#live.size <= maxLive) this.#shells.refill(() => this.#live.size <= 1);
  }

  /** `status` null: the shim left no exit status (its group was SIGKILLed). */
  #onExit(run: Running, status: ExitStatus | null): void {
    if (run.exit !== null || run.over) return;
    run.exit = status ?? { exitCode: null, signal: 'SIGKILL' };
    clearTimers(run);
    const { exitCode: code, signal } = run.exit;
    const how = describe(run.exit);
    if (status === null && !run.killSent) this.#system(run, 'the task\'s supervisor was killed (no exit status): counted as killed by SIGKILL');
    else this.#system(run, code !== null ? `exited with code ${code}` : `killed by ${signal}`);
    const base = { exitCode: code, signal };
    const result: AttemptResult = run.stop
      ? { ...base, error: run.stop.error, outcome: run.stop.outcome }
      : code === 0
        ? { ...base, error: null, outcome: 'success' }
        : { ...base, error: how, outcome: 'failed' };
    this.#finish(run, result);
  }

  /**
   * Reports the end exactly once; `run.done` settles after, and the attempt's folder is removed
   * then (until its end is recorded, it is what a restart adopts). The ti id is freed first so
   * that the next try of the same ti can be dispatched while this report is still in flight.
   */
  #finish(run: Running, result: AttemptResult): void {
    if (run.over) return;
    run.over = true;
    clearTimers(run);
    if (this.#live.get(run.attempt.tiId) === run) this.#live.delete(run.attempt.tiId);
    this.#reporting.add(run);
    void (async () => {
      await run.startedReport.promise;
      try {
        const reported = this.#reporter.finished(run.attempt, result);
        // Or while this end is on its way, for an attempt that did not run long.
        this.#refillShell(this.#helper?.usable ? 0 : 1);
        await reported;
        await run.dir?.removeLater();
      } catch (err) {
        this.#logError(run.attempt, err, 'reporting finished failed');
      }
      this.#reporting.delete(run);
      run.done.resolve();
    })();
  }

  /** Returns false when there is no process left to stop. */
  #stop(run: Running, req: StopRequest): boolean {
    if (run.over || run.exit !== null || run.process === null) return false;
    if (run.stop === null) run.stop = req;
    else if (req.signal === 'SIGTERM' || run.killSent) return true;
    this.#system(run, `${req.note ?? req.error}: sending ${req.signal} to process group ${run.process.pid}`);
    if (req.signal === 'SIGKILL') {
      run.killSent = true;
      this.#signalGroup(run, 'SIGKILL');
      return true;
    }
    this.#signalGroup(run, 'SIGTERM');
    const graceMs = run.attempt.killGraceMs ?? this.#killGraceMs;
    run.graceTimer = setTimeout(() => {
      run.graceTimer = null;
      this.#system(run, `still running ${graceMs} ms after SIGTERM: sending SIGKILL`);
      run.killSent = true;
      this.#signalGroup(run, 'SIGKILL');
    }, graceMs);
    return true;
  }

  #signalGroup(run: Running, signal: 'SIGTERM' | 'SIGKILL'): void {
    try {
      run.process?.signalGroup(signal);
    } catch (err) {
      this.#logError(run.attempt, err, `sending ${signal} failed`);
    }
  }

  /** Runs only while something is live, so an idle executor holds no timer. */
  #scheduleHeartbeat(): void {
    if (this.#heartbeatTimer !== null || this.#heartbeatInFlight !== null || this.#live.size === 0) return;
    this.#heartbeatTimer = setTimeout(() => {
      this.#heartbeatTimer = null;
      this.#heartbeatInFlight = this.#heartbeat().finally(() => {
        this.#heartbeatInFlight = null;
        this.#scheduleHeartbeat();
      });
    }, this.#heartbeatIntervalMs);
  }

  async #heartbeat(): Promise<void> {
    const sent = [...this.#live.values()].filter((r) => r.startSettled && r.exit === null && !r.over);
    if (sent.length === 0) return;
    let current: Set<string>;
    try {
      current = await this.#reporter.heartbeat(sent.map((r) => r.attempt));
      if (!(current instanceof Set)) throw new TypeError(`heartbeat resolved ${typeof current}, not a Set`);
    } catch (err) {
      // Do no harm: a store blip says nothing about the attempts; the next beat retries.
      this.#logger.error({ err, tiIds: sent.map((r) => r.attempt.tiId) }, 'heartbeat failed; retrying next interval');
      return;
    }
    for (const run of sent) {
      if (current.has(run.attempt.tiId)) continue;
      this.#stop(run, {
        outcome: 'superseded',
        error: 'attempt is no longer current',
        note: 'attempt is no longer current (superseded, reaped or cancelled elsewhere)',
        signal: 'SIGTERM',
      });
    }
  }

  #system(run: Running, line: string): void {
    this.#log(run.attempt, 'system', line);
  }

  #log(attempt: Attempt, stream: LogStream, line: string): void {
    try {
      this.#reporter.log(attempt, stream, line);
    } catch (err) {
      this.#logError(attempt, err, 'reporting a log line failed');
    }
  }

  #logError(attempt: Attempt, err: unknown, msg: string): void {
    this.#logger.error({ err, tiId: attempt.tiId, tryNumber: attempt.tryNumber }, msg);
  }
}

function describe(status: ExitStatus): string {
  return status.exitCode !== null ? `exit code ${status.exitCode}` : `killed by ${status.signal}`;
}

function deferred(): Deferred {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => (resolve = r));
  return { promise, resolve };
}

function clearTimers(run: Running): void {
  for (const t of [run.timeoutTimer, run.graceTimer]) if (t) clearTimeout(t);
  run.timeoutTimer = run.graceTimer = null;
}

function errorMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/** Shell-like quoting so a human can read (and usually paste) what was run. */
function formatCommand(command: string[]): string {
  const text = command.map((a) => (/^[\w@%+=:,./-]+$/.test(a) ? a : shellQuote(a))).join(' ');
  return text.length > 500 ? `${text.slice(0, 500)}…` : text;
}
