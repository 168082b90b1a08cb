import type { Logger } from 'pino';
import type { Attempt, AttemptReporter, AttemptResult, LogStream } from '../executor.js';
import type { ExitStatus } from '../process/attempt-dir.js';
import type { ShimProcess } from '../process/shim-process.js';
import { checkOutput, OUTPUT_BYTES } from '../../core/task-output.js';
import { clearTimers, deferred, describeExit, type Running, type StopRequest } from './running.js';

/**
 * The state machine over each attempt's `Running` record, from its process's start (or
 * re-attachment) to its `finished` report: the timeout, the stop (SIGTERM, then SIGKILL after
 * the grace), the exit read as a result, and the end reported exactly once. What starts an
 * attempt and when (dispatch, adoption, shutdown) is the executor's (subprocess-executor.ts).
 */

export interface RunningAttemptsOptions {
  reporter: AttemptReporter;
  logger: Logger;
  /** Time between SIGTERM and SIGKILL when an attempt is stopped, unless it names its own. */
  killGraceMs: number;
  /** Called as each end is being reported, before its report is awaited. */
  onEnding(): void;
  /**
   * Leave each attempt's folder once its end is reported: the reporter removes it once the end is
   * recorded for good (an agent: at FinishedAck), so a restart before that reports it again.
   */
  keepFolders?: boolean;
  /** The size limit of a task's output, unless its attempt names its own (default OUTPUT_BYTES.default). */
  maxOutputBytes?: number;
}

export class RunningAttempts {
  readonly #reporter: AttemptReporter;
  readonly #logger: Logger;
  readonly #killGraceMs: number;
  readonly #onEnding: () => void;
  readonly #keepFolders: boolean;
  readonly #maxOutputBytes: number;
  /** Attempts whose process may still be running, by ti id. */
  readonly #live = new Map<string, Running>();
  /** `finished` reports in flight; shutdown waits for them. */
  readonly #reporting = new Set<Running>();

  constructor(o: RunningAttemptsOptions) {
    this.#reporter = o.reporter;
    this.#logger = o.logger;
    this.#killGraceMs = o.killGraceMs;
    this.#onEnding = o.onEnding;
    this.#keepFolders = o.keepFolders ?? false;
    this.#maxOutputBytes = o.maxOutputBytes ?? OUTPUT_BYTES.default;
  }

  get size(): number {
    return this.#live.size;
  }

  get(tiId: string): Running | undefined {
    return this.#live.get(tiId);
  }

  has(tiId: string): boolean {
    return this.#live.has(tiId);
  }

  values(): IterableIterator<Running> {
    return this.#live.values();
  }

  /** Settles once every attempt live or reporting now has been reported. */
  allDone(): Promise<void[]> {
    return Promise.all([...this.#live.values(), ...this.#reporting].map((r) => r.done.promise));
  }

  /** Follows `attempt` from now on, by its ti id; its process is given later (`supervise`). */
  track(attempt: Attempt, proc: ShimProcess | null): Running {
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

  /** The timeout, and the end of the attempt's process. */
  supervise(run: Running, proc: ShimProcess): void {
    run.process = proc;
    run.dir = proc.dir;
    const { timeoutMs } = run.attempt;
    if (timeoutMs !== null) {
      run.timeoutTimer = setTimeout(() => {
        run.timeoutTimer = null;
        this.stop(run, { outcome: 'timed_out', error: `timed out after ${timeoutMs} ms`, signal: 'SIGTERM' });
      }, timeoutMs);
    }
    void proc.ended.then(
      (status) => this.onExit(run, status),
      (err) => {
        this.logError(run.attempt, err, 'watching the task failed');
        this.onExit(run, null);
      },
    );
  }

  /**
   * `status` null: the shim left no exit status (its group was SIGKILLed). `endedAt`: when it
   * ended, for an end read after it happened (adopt-attempts.ts); absent: now.
   */
  onExit(run: Running, status: ExitStatus | null, endedAt?: number): void {
    if (run.exit !== null || run.over) return;
    run.exit = status ?? { exitCode: null, signal: 'SIGKILL' };
    clearTimers(run);
    const { exitCode: code, signal } = run.exit;
    const how = describeExit(run.exit);
    if (status === null && !run.killSent)
      this.system(run, "the task's supervisor was killed (no exit status): counted as killed by SIGKILL");
    else this.system(run, code !== null ? `exited with code ${code}` : `killed by ${signal}`);
    const base = { exitCode: code, signal, ...(endedAt !== undefined ? { endedAt } : {}) };
    const result: AttemptResult = run.stop
      ? { ...base, error: run.stop.error, outcome: run.stop.outcome }
      : code === 0
        ? { ...base, error: null, outcome: 'success' }
        : { ...base, error: how, outcome: 'failed' };
    this.finish(run, this.#withOutput(run, result));
  }

  /**
   * The result with the task's output (LEOFLOW_OUTPUT), checked: a success whose output is too
   * big, not JSON, or missing when required fails instead, saying why; a failed attempt keeps a
   * good output (a retry's reader may want it) and ignores a bad one. Nothing half stored.
   */
  #withOutput(run: Running, result: AttemptResult): AttemptResult {
    if (run.dir === null || result.outcome === 'superseded' || result.outcome === 'cancelled') return result;
    const a = run.attempt;
    const rule = {
      taskId: a.taskId,
      required: a.outputRequired === true,
      maxBytes: a.outputMaxBytes ?? this.#maxOutputBytes,
    };
    let read;
    try {
      read = run.dir.readOutput(rule.maxBytes);
    } catch (err) {
      read = { bytes: null, size: 0 };
      this.logError(a, err, 'reading the output file failed');
    }
    const checked = checkOutput(rule, read.bytes, read.size);
    if (checked.ok) return checked.json === null ? result : { ...result, output: checked.json };
    if (result.outcome !== 'success') return result;
    this.system(run, checked.error);
    return { ...result, outcome: 'failed', error: checked.error };
  }

  /**
   * Reports the end exactly once; `run.done` settles after, and the attempt's folder is removed
   * then (until its end is recorded, it is what a restart adopts). The ti id is freed first so
   * that the next try of the same ti can be dispatched while this report is still in flight.
   */
  finish(run: Running, result: AttemptResult): void {
    if (run.over) return;
    run.over = true;
    clearTimers(run);
    if (this.#live.get(run.attempt.tiId) === run) this.#live.delete(run.attempt.tiId);
    this.#reporting.add(run);
    void (async () => {
      await run.startedReport.promise;
      try {
        const reported = this.#reporter.finished(run.attempt, result);
        this.#onEnding();
        await reported;
        if (!this.#keepFolders) await run.dir?.removeLater();
      } catch (err) {
        this.logError(run.attempt, err, 'reporting finished failed');
      }
      this.#reporting.delete(run);
      run.done.resolve();
    })();
  }

  /** Returns false when there is no process left to stop. */
  stop(run: Running, req: StopRequest): boolean {
    if (run.over || run.exit !== null || run.process === null) return false;
    if (run.stop === null) run.stop = req;
    else if (req.signal === 'SIGTERM' || run.killSent) return true;
    this.system(run, `${req.note ?? req.error}: sending ${req.signal} to process group ${run.process.pid}`);
    if (req.signal === 'SIGKILL') {
      run.killSent = true;
      this.#signalGroup(run, 'SIGKILL');
      return true;
    }
    this.#signalGroup(run, 'SIGTERM');
    const graceMs = run.attempt.killGraceMs ?? this.#killGraceMs;
    run.graceTimer = setTimeout(() => {
      run.graceTimer = null;
      this.system(run, `still running ${graceMs} ms after SIGTERM: sending SIGKILL`);
      run.killSent = true;
      this.#signalGroup(run, 'SIGKILL');
    }, graceMs);
    return true;
  }

  #signalGroup(run: Running, signal: 'SIGTERM' | 'SIGKILL'): void {
    try {
      run.process?.signalGroup(signal);
    } catch (err) {
      this.logError(run.attempt, err, `sending ${signal} failed`);
    }
  }

  system(run: Running, line: string): void {
    this.log(run.attempt, 'system', line);
  }

  log(attempt: Attempt, stream: LogStream, line: string): void {
    try {
      this.#reporter.log(attempt, stream, line);
    } catch (err) {
      this.logError(attempt, err, 'reporting a log line failed');
    }
  }

  logError(attempt: Attempt, err: unknown, msg: string): void {
    this.#logger.error({ err, tiId: attempt.tiId, tryNumber: attempt.tryNumber }, msg);
  }
}
