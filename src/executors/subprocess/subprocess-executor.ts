import path from 'node:path';
import type { Logger } from 'pino';
import type { Attempt, AttemptReporter, Executor, LogStream } from '../executor.js';
import { ReadyShells } from '../process/ready-shell.js';
import { ShimProcess, type StartedHow } from '../process/shim-process.js';
import { SpawnHelper } from '../process/spawn-helper.js';
import { adoptAttempts, type Adopted } from './adopt-attempts.js';
import { formatCommand } from './format-command.js';
import { HeartbeatLoop } from './heartbeat-loop.js';
import type { Running } from './running.js';
import { RunningAttempts } from './running-attempts.js';

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
  /**
   * Set in the environment of every shim and task (supervisor-mark.ts): an agent marks its own, so
   * a later process of the same agent finds them whatever its state directory.
   */
  markEnv?: Readonly<Record<string, string>>;
  /** See RunningAttemptsOptions.keepFolders. */
  keepFolders?: boolean;
  /** See RunningAttemptsOptions.maxOutputBytes. */
  maxOutputBytes?: number;
}

export const SHUTDOWN_ERROR = 'control plane shut down before the task ended';

/** An attempt still running this long after its start has the next ready shell made meanwhile. */
const REFILL_WHILE_RUNNING_MS = 5;

/**
 * Runs each attempt under a shim (process/shim.ts), a supervisor of its own process group that
 * outlives this process (Lite edition, and each agent). The task's liveness is its heartbeat, so
 * there is no per-task agent to start; the store's answer to the heartbeat is how an attempt
 * learns it was superseded, reaped or cancelled elsewhere. After a crash or a restart, `adopt`
 * re-attaches to the shims left running and records the real outcome of those that ended.
 * Each attempt's own life (timeout, stop, exit, end reported) is running-attempts.ts.
 */
export function createSubprocessExecutor(opts: SubprocessExecutorOptions): SubprocessExecutor {
  return new SubprocessExecutor(opts);
}

export class SubprocessExecutor implements Executor {
  readonly kind = 'subprocess';
  readonly #reporter: AttemptReporter;
  readonly #logger: Logger;
  readonly #root: string;
  /** Attempts whose process may still be running, by ti id, and their ends being reported. */
  readonly #runs: RunningAttempts;
  readonly #heartbeat: HeartbeatLoop;
  #shutdown: Promise<void> | null = null;
  readonly #shells: ReadyShells;
  readonly #helper: SpawnHelper | null;
  readonly #keepReady: boolean;
  readonly #onStart: SubprocessExecutorOptions['onStart'];

  constructor(opts: SubprocessExecutorOptions) {
    const shell = opts.readyShell ?? true;
    const env = opts.markEnv ?? {};
    this.#shells = new ReadyShells({ logger: opts.logger, env, ...(typeof shell === 'string' ? { shell } : {}) });
    this.#keepReady = shell !== false;
    this.#helper = opts.spawnHelper === false ? null : new SpawnHelper({ logger: opts.logger, env });
    this.#onStart = opts.onStart;
    this.#reporter = opts.reporter;
    this.#logger = opts.logger;
    this.#root = path.resolve(opts.attemptsDir);
    this.#runs = new RunningAttempts({
      reporter: opts.reporter,
      logger: opts.logger,
      killGraceMs: opts.killGraceMs,
      // Or while this end is on its way, for an attempt that did not run long.
      onEnding: () => this.#refillShell(this.#helper?.usable ? 0 : 1),
      keepFolders: opts.keepFolders ?? false,
      ...(opts.maxOutputBytes !== undefined ? { maxOutputBytes: opts.maxOutputBytes } : {}),
    });
    this.#heartbeat = new HeartbeatLoop({
      runs: this.#runs,
      reporter: opts.reporter,
      logger: opts.logger,
      intervalMs: opts.heartbeatIntervalMs,
    });
  }

  get activeCount(): number {
    return this.#runs.size;
  }

  /** Whether this attempt's process is alive here: a positive sign of life no reaper may ignore. */
  holdsLive(tiId: string, attemptToken: string): boolean {
    const run = this.#runs.get(tiId);
    return run !== undefined && run.attempt.attemptToken === attemptToken && !run.over;
  }

  async dispatch(attempt: Attempt): Promise<void> {
    if (this.#shutdown) throw new Error(`subprocess executor is shutting down: not starting ${attempt.tiId}`);
    const stale = this.#runs.get(attempt.tiId);
    if (stale && stale.attempt.tryNumber < attempt.tryNumber) {
      // An older attempt of this TI still runs here: it was declared lost (e.g. heartbeats could
      // not be written) and a new try was claimed. Stop the old one first, so two attempts of a
      // task never run at once, then start the new one.
      this.#logger.warn(
        { tiId: attempt.tiId, tryNumber: attempt.tryNumber, staleTry: stale.attempt.tryNumber },
        'stopping a superseded attempt before starting the new try',
      );
      this.#runs.stop(stale, {
        outcome: 'superseded',
        error: `superseded by try ${attempt.tryNumber}`,
        signal: 'SIGTERM',
      });
      await stale.done.promise;
    }
    const held = this.#runs.get(attempt.tiId);
    if (held) {
      // Leader overlap can dispatch twice; the deterministic dispatch key collapses onto this process.
      this.#logger.warn(
        { tiId: attempt.tiId, tryNumber: attempt.tryNumber, heldTryNumber: held.attempt.tryNumber },
        'duplicate dispatch ignored: attempt already running here',
      );
      return;
    }
    if (attempt.inputs === undefined && attempt.upstreams && this.#reporter.inputs) {
      attempt = { ...attempt, inputs: await this.#reporter.inputs(attempt) };
    }
    const run = this.#runs.track(attempt, null);
    if (attempt.inputs && 'error' in attempt.inputs) {
      // An input it names is missing: the attempt fails saying which, and nothing runs.
      run.startedReport.resolve();
      this.#runs.system(run, attempt.inputs.error);
      this.#runs.finish(run, { exitCode: null, signal: null, error: attempt.inputs.error, outcome: 'spawn_failed' });
      await run.done.promise;
      return;
    }
    // Output read before the start is known (a task that wrote and ended at once, its end seen in
    // the same turn as its start) waits here, so the attempt's log begins with its `started` line.
    let early: [LogStream, string][] | null = [];
    const onLine = (stream: LogStream, line: string) =>
      early ? early.push([stream, line]) : this.#runs.log(attempt, stream, line);
    const logEarly = () => {
      for (const [stream, line] of early ?? []) this.#runs.log(attempt, stream, line);
      early = null;
    };
    let start;
    try {
      start = await this.#startOnlyHere(run, onLine);
    } catch (err) {
      start = {
        ok: false as const,
        error: `failed to start ${JSON.stringify(attempt.command[0])}: ${errorMessage(err)}`,
      };
    }
    if (!start.ok) {
      run.startedReport.resolve();
      this.#runs.system(run, start.error);
      logEarly();
      this.#runs.finish(run, { exitCode: null, signal: null, error: start.error, outcome: 'spawn_failed' });
      await run.done.promise;
      return;
    }
    this.#onStart?.(start.how);
    this.#runs.system(run, `started pid ${start.process.pid}: ${formatCommand(attempt.command)}`);
    logEarly();
    this.#runs.supervise(run, start.process);
    try {
      const current = await this.#reporter.started(attempt, { pid: start.process.pid });
      if (!current) {
        this.#runs.stop(run, {
          outcome: 'superseded',
          error: 'attempt superseded before it started',
          signal: 'SIGKILL',
        });
      }
    } catch (err) {
      // Unknown whether the store recorded it; keep running and let the next heartbeat decide.
      this.#runs.logError(attempt, err, 'reporting started failed; the heartbeat will decide whether it is current');
    } finally {
      run.startSettled = true;
      run.startedReport.resolve();
      this.#heartbeat.schedule();
    }
    // The next attempt's shell is made while this one runs, if it runs a while (else when it
    // ends): then the fork holds this thread while it would wait anyway (ready-shell.ts).
    setTimeout(() => !run.over && this.#refillShell(1), REFILL_WHILE_RUNNING_MS).unref();
  }

  cancel(tiId: string, reason: string): boolean {
    const run = this.#runs.get(tiId);
    if (!run) return false;
    return this.#runs.stop(run, {
      outcome: 'cancelled',
      error: reason,
      note: `cancelled: ${reason}`,
      signal: 'SIGTERM',
    });
  }

  /** After a restart, before any new work: the attempts an earlier process left (adopt-attempts.ts). */
  adopt(): Promise<Adopted> {
    return adoptAttempts({
      root: this.#root,
      runs: this.#runs,
      heartbeat: this.#heartbeat,
      reporter: this.#reporter,
      logger: this.#logger,
    });
  }

  shutdown(waitMs: number): Promise<void> {
    this.#shutdown ??= this.#drainAndStop(waitMs);
    return this.#shutdown;
  }

  /** Starts from the ready shell only a lone start (this attempt is the only one live here). */
  #startOnlyHere(run: Running, onLine: (stream: LogStream, line: string) => void) {
    return ShimProcess.start(
      this.#shells,
      this.#helper,
      this.#root,
      run.attempt,
      { onLine },
      { useReady: this.#runs.size <= 1 },
    );
  }

  async #drainAndStop(waitMs: number): Promise<void> {
    // Dispatch refuses from here on, so this snapshot holds every attempt there will be.
    const all = this.#runs.allDone();
    let limit: NodeJS.Timeout | undefined;
    this.#shells.close();
    await Promise.race([all, new Promise<void>((resolve) => (limit = setTimeout(resolve, waitMs)))]);
    clearTimeout(limit);
    for (const run of this.#runs.values()) {
      this.#runs.stop(run, { outcome: 'failed', error: SHUTDOWN_ERROR, signal: 'SIGTERM' });
    }
    await all;
    this.#helper?.close();
    await this.#heartbeat.close();
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
    if (this.#keepReady && this.#runs.size <= maxLive) this.#shells.refill(() => this.#runs.size <= 1);
  }
}

function errorMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
