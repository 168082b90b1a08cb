import { spawn, type ChildProcess } from 'node:child_process';
import type { Readable } from 'node:stream';
import type { Logger } from 'pino';
import type { Attempt, AttemptReporter, AttemptResult, Executor, LogStream } from './executor.js';
import { LineSplitter } from './line-splitter.js';

export interface SubprocessExecutorOptions {
  reporter: AttemptReporter;
  logger: Logger;
  /** Time between SIGTERM and SIGKILL when an attempt is stopped. */
  killGraceMs: number;
  heartbeatIntervalMs: number;
  /**
   * How long to keep reading output after the task's process exited. Bounded because a
   * descendant that left the process group (setsid, a daemon) may hold the pipes open forever.
   * Default 2000.
   */
  outputDrainMs?: number;
}

export const SHUTDOWN_ERROR = 'control plane shut down before the task ended';

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
  child: ChildProcess | null;
  /** Also the process group id: the child leads its own group (`detached`). */
  pid: number | null;
  /** Settles when `started` has, so `finished` never overtakes it in the store. */
  startedReport: Deferred;
  /** Heartbeats are sent only after `started`, or the store could not yet know the attempt. */
  startSettled: boolean;
  exit: { code: number | null; signal: NodeJS.Signals | null } | null;
  openStreams: number;
  stop: StopRequest | null;
  killSent: boolean;
  timeoutTimer: NodeJS.Timeout | null;
  graceTimer: NodeJS.Timeout | null;
  drainTimer: NodeJS.Timeout | null;
  /** Set once the process is over; from then on only its `finished` report is pending. */
  over: boolean;
  /** Settles when `finished` has been reported (or its failure logged). */
  done: Deferred;
}

interface Deferred {
  promise: Promise<void>;
  resolve: () => void;
}

/**
 * Runs each attempt as a child process group of the control plane (Lite edition). The child's
 * liveness is its heartbeat, so there is no per-task agent to start; the store's answer to the
 * heartbeat is how an attempt learns it was superseded, reaped or cancelled elsewhere.
 */
export function createSubprocessExecutor(opts: SubprocessExecutorOptions): Executor {
  return new SubprocessExecutor(opts);
}

class SubprocessExecutor implements Executor {
  readonly kind = 'subprocess';
  readonly #reporter: AttemptReporter;
  readonly #logger: Logger;
  readonly #killGraceMs: number;
  readonly #heartbeatIntervalMs: number;
  readonly #outputDrainMs: number;
  /** Attempts whose process may still be running, by ti id. */
  readonly #live = new Map<string, Running>();
  /** `finished` reports in flight; shutdown waits for them. */
  readonly #reporting = new Set<Running>();
  #shutdown: Promise<void> | null = null;
  #heartbeatTimer: NodeJS.Timeout | null = null;
  #heartbeatInFlight: Promise<void> | null = null;

  constructor(opts: SubprocessExecutorOptions) {
    this.#reporter = opts.reporter;
    this.#logger = opts.logger;
    this.#killGraceMs = opts.killGraceMs;
    this.#heartbeatIntervalMs = opts.heartbeatIntervalMs;
    this.#outputDrainMs = opts.outputDrainMs ?? 2000;
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
    const run: Running = {
      attempt,
      child: null,
      pid: null,
      startedReport: deferred(),
      startSettled: false,
      exit: null,
      openStreams: 0,
      stop: null,
      killSent: false,
      timeoutTimer: null,
      graceTimer: null,
      drainTimer: null,
      over: false,
      done: deferred(),
    };
    this.#live.set(attempt.tiId, run);

    const spawnError = await this.#spawn(run);
    if (spawnError !== null) {
      run.startedReport.resolve();
      this.#system(run, spawnError);
      this.#finish(run, { exitCode: null, signal: null, error: spawnError, outcome: 'spawn_failed' });
      await run.done.promise;
      return;
    }
    try {
      const current = await this.#reporter.started(attempt, { pid: run.pid });
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
  }

  cancel(tiId: string, reason: string): boolean {
    const run = this.#live.get(tiId);
    if (!run) return false;
    return this.#stop(run, { outcome: 'cancelled', error: reason, note: `cancelled: ${reason}`, signal: 'SIGTERM' });
  }

  shutdown(waitMs: number): Promise<void> {
    this.#shutdown ??= this.#drainAndStop(waitMs);
    return this.#shutdown;
  }

  async #drainAndStop(waitMs: number): Promise<void> {
    // Dispatch refuses from here on, so this snapshot holds every attempt there will be.
    const all = Promise.all([...this.#live.values(), ...this.#reporting].map((r) => r.done.promise));
    let limit: NodeJS.Timeout | undefined;
    await Promise.race([all, new Promise<void>((resolve) => (limit = setTimeout(resolve, waitMs)))]);
    clearTimeout(limit);
    for (const run of this.#live.values()) {
      this.#stop(run, { outcome: 'failed', error: SHUTDOWN_ERROR, signal: 'SIGTERM' });
    }
    await all;
    if (this.#heartbeatTimer) clearTimeout(this.#heartbeatTimer);
    this.#heartbeatTimer = null;
    await this.#heartbeatInFlight;
  }

  /** Returns null once the child has spawned, or the reason it could not start. */
  #spawn(run: Running): Promise<string | null> {
    const { attempt } = run;
    const [file, ...args] = attempt.command;
    const where = attempt.cwd ? ` in ${attempt.cwd}` : '';
    if (file === undefined || file === '') return Promise.resolve('failed to start: empty command');
    let child: ChildProcess;
    try {
      child = spawn(file, args, {
        detached: true,
        stdio: ['ignore', 'pipe', 'pipe'],
        cwd: attempt.cwd ?? undefined,
        env: { ...process.env, ...attempt.env },
      });
    } catch (err) {
      // Invalid arguments (a NUL byte, say) throw instead of emitting 'error'.
      return Promise.resolve(`failed to start ${JSON.stringify(file)}${where}: ${errorMessage(err)}`);
    }
    run.child = child;
    run.pid = child.pid ?? null;
    if (run.pid !== null) {
      // A known pid means the process exists (uv_spawn returns after exec): it has started, so
      // say so now rather than a turn of the event loop later, when its 'spawn' event comes.
      this.#watch(run, child);
      // After a successful spawn 'error' only means a signal could not be sent.
      child.on('error', (err) => this.#logError(attempt, err, 'child process error'));
      this.#system(run, `started pid ${run.pid}: ${formatCommand(attempt.command)}`);
      return Promise.resolve(null);
    }
    return new Promise((resolve) => {
      child.on('error', (err) => {
        child.stdout?.destroy();
        child.stderr?.destroy();
        resolve(`failed to start ${JSON.stringify(file)}${where}: ${errorMessage(err)}`);
      });
    });
  }

  #watch(run: Running, child: ChildProcess): void {
    const { timeoutMs } = run.attempt;
    if (timeoutMs !== null) {
      run.timeoutTimer = setTimeout(() => {
        run.timeoutTimer = null;
        this.#stop(run, { outcome: 'timed_out', error: `timed out after ${timeoutMs} ms`, signal: 'SIGTERM' });
      }, timeoutMs);
    }
    for (const [stream, name] of [
      [child.stdout, 'stdout'],
      [child.stderr, 'stderr'],
    ] as const) {
      if (stream) this.#readLines(run, stream, name);
    }
    child.once('exit', (code, signal) => this.#onExit(run, code, signal));
  }

  #readLines(run: Running, stream: Readable, name: 'stdout' | 'stderr'): void {
    const splitter = new LineSplitter();
    run.openStreams++;
    stream.on('data', (chunk: Buffer) => {
      for (const line of splitter.push(chunk)) this.#log(run.attempt, name, line);
    });
    stream.on('error', (err) => this.#logError(run.attempt, err, `reading ${name} failed`));
    stream.once('close', () => {
      for (const line of splitter.end()) this.#log(run.attempt, name, line);
      run.openStreams--;
      this.#finishIfOver(run);
    });
  }

  #onExit(run: Running, code: number | null, signal: NodeJS.Signals | null): void {
    run.exit = { code, signal };
    clearTimers(run);
    // The task is over when its leader is: descendants left in the group must not outlive it.
    if (run.pid !== null) this.#signalGroup(run, 'SIGKILL');
    if (run.openStreams > 0) {
      run.drainTimer = setTimeout(() => {
        run.drainTimer = null;
        this.#system(run, `output still open ${this.#outputDrainMs} ms after exit (a process left the group?): closing it`);
        run.child?.stdout?.destroy();
        run.child?.stderr?.destroy();
      }, this.#outputDrainMs);
    }
    this.#finishIfOver(run);
  }

  #finishIfOver(run: Running): void {
    if (run.over || run.exit === null || run.openStreams > 0) return;
    const { code, signal } = run.exit;
    const how = code !== null ? `exit code ${code}` : `killed by ${signal}`;
    this.#system(run, code !== null ? `exited with code ${code}` : `killed by ${signal}`);
    const base = { exitCode: code, signal };
    const result: AttemptResult = run.stop
      ? { ...base, error: run.stop.error, outcome: run.stop.outcome }
      : code === 0
        ? { ...base, error: null, outcome: 'success' }
        : { ...base, error: how, outcome: 'failed' };
    this.#finish(run, result);
  }

  /**
   * Reports the end exactly once; `run.done` settles after. The ti id is freed first so that
   * the next try of the same ti can be dispatched while this report is still in flight.
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
        await this.#reporter.finished(run.attempt, result);
      } catch (err) {
        this.#logError(run.attempt, err, 'reporting finished failed');
      }
      this.#reporting.delete(run);
      run.done.resolve();
    })();
  }

  /** Returns false when there is no process left to stop. */
  #stop(run: Running, req: StopRequest): boolean {
    if (run.over || run.exit !== null || run.pid === null) return false;
    if (run.stop === null) run.stop = req;
    else if (req.signal === 'SIGTERM' || run.killSent) return true;
    this.#system(run, `${req.note ?? req.error}: sending ${req.signal} to process group ${run.pid}`);
    if (req.signal === 'SIGKILL') {
      run.killSent = true;
      this.#signalGroup(run, 'SIGKILL');
      return true;
    }
    this.#signalGroup(run, 'SIGTERM');
    run.graceTimer = setTimeout(() => {
      run.graceTimer = null;
      this.#system(run, `still running ${this.#killGraceMs} ms after SIGTERM: sending SIGKILL`);
      run.killSent = true;
      this.#signalGroup(run, 'SIGKILL');
    }, this.#killGraceMs);
    return true;
  }

  #signalGroup(run: Running, signal: 'SIGTERM' | 'SIGKILL'): void {
    if (run.pid === null) return;
    try {
      process.kill(-run.pid, signal);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ESRCH') this.#logError(run.attempt, err, `sending ${signal} failed`);
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

function deferred(): Deferred {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => (resolve = r));
  return { promise, resolve };
}

function clearTimers(run: Running): void {
  for (const t of [run.timeoutTimer, run.graceTimer, run.drainTimer]) if (t) clearTimeout(t);
  run.timeoutTimer = run.graceTimer = run.drainTimer = null;
}

function errorMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/** Shell-like quoting so a human can read (and usually paste) what was run. */
function formatCommand(command: string[]): string {
  const text = command.map((a) => (/^[\w@%+=:,./-]+$/.test(a) ? a : `'${a.replaceAll("'", `'\\''`)}'`)).join(' ');
  return text.length > 500 ? `${text.slice(0, 500)}…` : text;
}
