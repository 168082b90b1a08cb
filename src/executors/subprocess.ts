import { spawn, type ChildProcess } from 'node:child_process';
import { statSync } from 'node:fs';
import type { Readable } from 'node:stream';
import type { Logger } from 'pino';
import type { Attempt, AttemptReporter, AttemptResult, Executor, LogStream } from './executor.js';
import { LineSplitter } from './line-splitter.js';
import { ReadyShells, execLines, shellQuote } from './ready-shell.js';

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
  /**
   * Start attempts from a shell kept ready (ready-shell.ts) when it can run them exactly as
   * `spawn()` would: ~1–2 ms sooner, with the fork off their way. Default true; the shell is
   * /bin/sh unless `readyShell` names another.
   */
  readyShell?: boolean | string;
  /** Told how each attempt's process was started (for metrics and tests). */
  onStart?(how: 'spawn' | 'ready-shell'): void;
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
  child: ChildProcess | null;
  /** Also the process group id: the child leads its own group (`detached`). */
  pid: number | null;
  /** Settles when `started` has, so `finished` never overtakes it in the store. */
  startedReport: Deferred;
  /** Heartbeats are sent only after `started`, or the store could not yet know the attempt. */
  startSettled: boolean;
  exit: { code: number | null; signal: NodeJS.Signals | null } | null;
  openStreams: number;
  /** Output read before the process is known to have started (a ready shell's), logged after. */
  held: ['stdout' | 'stderr', string][] | null;
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

// Longer than our files usually are: an attempt's whole life here (start from a ready shell or a
// spawn, output, exit, stop, heartbeat) is one state machine over `Running`, and it reads best in
// one place. The attempt supervisor (a shim that outlives this process) will take its process half.
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
  readonly #shells: ReadyShells | null;
  readonly #onStart: SubprocessExecutorOptions['onStart'];

  constructor(opts: SubprocessExecutorOptions) {
    const shell = opts.readyShell ?? true;
    this.#shells = shell === false ? null : new ReadyShells({ logger: opts.logger, ...(typeof shell === 'string' ? { shell } : {}) });
    if (this.#shells && !this.#shells.usable) this.#shells = null;
    this.#onStart = opts.onStart;
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
      held: null,
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
    // The next attempt's shell is made while this one runs, if it runs a while (else when it
    // ends): then the fork holds this thread while it would wait anyway (ready-shell.ts).
    if (this.#shells) setTimeout(() => !run.over && this.#refillShell(), REFILL_WHILE_RUNNING_MS).unref();
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
    this.#shells?.close();
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

  /**
   * Makes the next ready shell while this executor runs at most one attempt. A ready shell is for
   * the latency of a lone start (a chain's next task), and only such a start takes it
   * (`#fromReadyShell`). Busier, attempts are spawned: a ready shell costs an exec more than a
   * spawn, and its fork would hold up the other attempts' output and exits (taken by any start,
   * the real agent's `true` tasks went 15 % slower at 10 at once).
   */
  #refillShell(): void {
    if (this.#live.size <= 1) this.#shells?.refill();
  }

  /** Returns null once the child has spawned, or the reason it could not start. */
  #spawn(run: Running): Promise<string | null> {
    const [file] = run.attempt.command;
    if (file === undefined || file === '') return Promise.resolve('failed to start: empty command');
    return this.#fromReadyShell(run) ?? this.#spawnDirect(run);
  }

  /** Spawns the attempt's process (a fork of this one, then its exec). */
  #spawnDirect(run: Running): Promise<string | null> {
    const { attempt } = run;
    const [file, ...args] = attempt.command as [string, ...string[]];
    const where = attempt.cwd ? ` in ${attempt.cwd}` : '';
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
      this.#onStart?.('spawn');
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

  /**
   * Starts the attempt from the ready shell, if there is one and the shell would run it exactly as
   * `spawn()` does; null when it is to be spawned (ready-shell.ts says what is checked first).
   */
  #fromReadyShell(run: Running): Promise<string | null> | null {
    const shells = this.#shells;
    // Only a lone start (this attempt is the only one live here): see #refillShell.
    if (!shells || this.#live.size > 1) return null;
    const { command, env, cwd } = run.attempt;
    const lines = execLines(command, env, cwd);
    if (lines === null || (cwd !== null && !isDirectory(cwd))) return null;
    if (!shells.findsExecutable(command[0]!, env.PATH ?? process.env.PATH, cwd)) return null;
    const shell = shells.take();
    if (!shell) return null;
    return (async () => {
      // Output is read from now on, and held until the start is logged: a command that exits at
      // once may be gone before its start is seen, and Node drains the output no one reads on
      // the turn after an exit. Its exit is kept for the same reason (both may come in one turn,
      // in either order, with the end of the shell's pipe).
      run.child = shell;
      run.held = [];
      this.#readOutput(run, shell);
      let exited: [number | null, NodeJS.Signals | null] | null = null;
      const early = (code: number | null, signal: NodeJS.Signals | null) => (exited = [code, signal]);
      shell.once('exit', early);
      const started = await shells.start(shell, lines);
      shell.off('exit', early);
      if (!started.ok) {
        // Not this attempt's process after all (it has written nothing): dropped.
        run.child = null;
        run.held = null;
        run.openStreams = 0;
        shell.stdout?.destroy();
        shell.stderr?.destroy();
        if (started.reason === 'gone') return this.#spawnDirect(run);
        // The directory went away since it was checked; the shell exits by itself.
        return `failed to start ${JSON.stringify(command[0])} in ${cwd}: cannot enter the directory`;
      }
      run.pid = shell.pid ?? null;
      this.#onStart?.('ready-shell');
      this.#system(run, `started pid ${run.pid}: ${formatCommand(command)}`);
      const held = run.held;
      run.held = null;
      for (const [name, line] of held) this.#log(run.attempt, name, line);
      this.#watchExit(run, shell);
      const gone: [number | null, NodeJS.Signals | null] | null = exited;
      if (gone) this.#onExit(run, gone[0], gone[1]);
      return null;
    })();
  }

  #watch(run: Running, child: ChildProcess): void {
    this.#readOutput(run, child);
    this.#watchExit(run, child);
  }

  /** The timeout, and the exit of the attempt's process. */
  #watchExit(run: Running, child: ChildProcess): void {
    const { timeoutMs } = run.attempt;
    if (timeoutMs !== null) {
      run.timeoutTimer = setTimeout(() => {
        run.timeoutTimer = null;
        this.#stop(run, { outcome: 'timed_out', error: `timed out after ${timeoutMs} ms`, signal: 'SIGTERM' });
      }, timeoutMs);
    }
    child.once('exit', (code, signal) => this.#onExit(run, code, signal));
  }

  #readOutput(run: Running, child: ChildProcess): void {
    for (const [stream, name] of [
      [child.stdout, 'stdout'],
      [child.stderr, 'stderr'],
    ] as const) {
      if (stream) this.#readLines(run, child, stream, name);
    }
  }

  /** Reads one output stream of `child` by lines, for as long as `child` is the attempt's process. */
  #readLines(run: Running, child: ChildProcess, stream: Readable, name: 'stdout' | 'stderr'): void {
    const splitter = new LineSplitter();
    run.openStreams++;
    const out = (line: string) => (run.held ? run.held.push([name, line]) : this.#log(run.attempt, name, line));
    stream.on('data', (chunk: Buffer) => {
      if (run.child !== child) return;
      for (const line of splitter.push(chunk)) out(line);
    });
    stream.on('error', (err) => this.#logError(run.attempt, err, `reading ${name} failed`));
    stream.once('close', () => {
      if (run.child !== child) return;
      for (const line of splitter.end()) out(line);
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
        const reported = this.#reporter.finished(run.attempt, result);
        // Or while this end is on its way, for an attempt that did not run long.
        this.#refillShell();
        await reported;
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

function isDirectory(p: string): boolean {
  try {
    return statSync(p).isDirectory();
  } catch {
    return false;
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
  const text = command.map((a) => (/^[\w@%+=:,./-]+$/.test(a) ? a : shellQuote(a))).join(' ');
  return text.length > 500 ? `${text.slice(0, 500)}…` : text;
}
