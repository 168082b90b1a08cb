/**
 * Runs the attempts assigned to an agent (through the subprocess executor) and keeps every
 * report about them in the outbox until the control plane has it. It knows nothing of streams:
 * the runtime feeds it what arrives and a session writes its outbox.
 */

import path from 'node:path';
import type { Logger } from 'pino';
import type { Attempt, AttemptReporter, AttemptResult } from '../core/attempt.js';
import { AttemptDir } from '../executors/process/attempt-dir.js';
import { supervisorMark } from '../executors/process/supervisor-mark.js';
import { createSubprocessExecutor, type SubprocessExecutor } from '../executors/subprocess/subprocess-executor.js';
import type {
  Assign,
  AttemptRef,
  Cancel,
  ConnectRequest,
  FinishedAck,
  LogAck,
  Welcome,
} from '../gen/leoflow/v1/agent_pb.js';
import { attemptFromAssign, attemptKey } from './attempt-messages.js';
import { AttemptReports } from './attempt-reports.js';
import { ExecutorSlots } from './executor-slots.js';
import { HeldAttempts, type HeldAttempt } from './held-attempts.js';
import { takeLeftovers } from './leftover-attempts.js';
import { LogBatcher, type LogBatcherOptions } from './log-batcher.js';
import { Outbox } from './outbox.js';

export interface AttemptRunnerOptions {
  logger: Logger;
  /** This agent's id: its shims carry it, so a later process of it finds them (supervisor-mark.ts). */
  agentId: string;
  /** Where each attempt's shim keeps its output and exit status (`<state dir>/attempts`). */
  attemptsDir: string;
  /** Time between SIGTERM and SIGKILL for an attempt whose Assign names no kill grace. */
  killGraceMs: number;
  /** How long output lines wait to be batched. */
  logFlushMs: number;
  logBatcher?: LogBatcherOptions;
  /** Something was queued in the outbox: write it if a stream is up. */
  wake(): void;
  /** The set of held attempts changed (one ended, was acknowledged or forgotten). */
  changed(): void;
}

/** The executor's own heartbeat must not stop anything: the control plane says what to stop. */
const EXECUTOR_HEARTBEAT_MS = 3_600_000;

export class AttemptRunner {
  readonly outbox = new Outbox<ConnectRequest>();
  readonly #held = new HeldAttempts();
  readonly #batcher: LogBatcher;
  readonly #executor: SubprocessExecutor;
  readonly #attemptsDir: string;
  /** Attempts an earlier process of this agent left under their shims, until Welcome says which
   *  are still current (and how much of their logs the control plane has). */
  readonly #leftovers = new Set<string>();
  readonly #logsSoFar = new Map<string, { stdout: number; stderr: number }>();
  readonly #slots = new ExecutorSlots();
  readonly #reports: AttemptReports;
  readonly #opts: AttemptRunnerOptions;
  readonly #log: Logger;
  /** Set while shutting down with handback: a late Assign is answered FAILED, not run. */
  #refuse: string | null = null;

  constructor(opts: AttemptRunnerOptions) {
    this.#opts = opts;
    this.#log = opts.logger;
    this.#batcher = new LogBatcher(opts.logBatcher);
    this.#attemptsDir = opts.attemptsDir;
    this.#reports = new AttemptReports({
      outbox: this.outbox,
      held: this.#held,
      batcher: this.#batcher,
      logger: opts.logger,
      logFlushMs: opts.logFlushMs,
      wake: () => opts.wake(),
      changed: () => opts.changed(),
    });
    this.#executor = createSubprocessExecutor({
      reporter: this.#reporter(),
      logger: opts.logger,
      attemptsDir: opts.attemptsDir,
      killGraceMs: opts.killGraceMs,
      heartbeatIntervalMs: EXECUTOR_HEARTBEAT_MS,
      markEnv: supervisorMark(opts.agentId),
      // An end is recorded for good at its FinishedAck: until then its folder is what a restart
      // of this agent reports it from.
      keepFolders: true,
    });
  }

  /** Attempts held (running, or ended and awaiting FinishedAck). */
  get size(): number {
    return this.#held.size;
  }

  get runningCount(): number {
    return this.#held.running().length;
  }

  refs(): AttemptRef[] {
    return this.#held.refs();
  }

  /** The longest time between SIGTERM and SIGKILL of the running attempts (0 for none). */
  longestKillGraceMs(): number {
    return Math.max(0, ...this.#held.running().map((h) => h.attempt.killGraceMs ?? this.#opts.killGraceMs));
  }

  assign(msg: Assign): void {
    let attempt: Attempt;
    try {
      attempt = attemptFromAssign(msg);
    } catch (err) {
      this.#log.error({ err }, 'invalid Assign ignored');
      return;
    }
    const ids = { tiId: attempt.tiId, try: attempt.tryNumber };
    if (this.#held.get(attemptKey(attempt))) {
      this.#log.warn(ids, 'duplicate Assign ignored: attempt already held');
      return;
    }
    for (const older of this.#held.ofTi(attempt.tiId)) {
      if (older.phase === 'running')
        this.#supersede(older, `try ${attempt.tryNumber} of the same task instance was assigned`);
    }
    const held = this.#held.add(attempt);
    if (this.#refuse !== null) {
      this.#log.warn(ids, 'Assign while shutting down: not started, reported failed');
      this.#reports.finished(held, {
        exitCode: null,
        signal: null,
        error: `not started: ${this.#refuse}`,
        outcome: 'failed',
      });
      return;
    }
    this.#log.info(
      {
        ...ids,
        dagId: attempt.dagId,
        taskId: attempt.taskId,
        timeoutMs: attempt.timeoutMs,
        killGraceMs: attempt.killGraceMs ?? this.#opts.killGraceMs,
      },
      'attempt assigned',
    );
    void this.#dispatch(held);
  }

  cancel(msg: Cancel): void {
    const held = msg.attempt ? this.#held.get(attemptKey(msg.attempt)) : undefined;
    if (!held) {
      this.#log.debug(
        { tiId: msg.attempt?.tiId, try: msg.attempt?.tryNumber },
        'Cancel for an attempt not held here ignored',
      );
      return;
    }
    if (held.phase !== 'running') return; // its Finished is on the way already
    const reason = msg.reason || 'cancelled by the control plane';
    this.#log.info({ tiId: held.attempt.tiId, try: held.attempt.tryNumber, reason }, 'cancelling attempt');
    this.#stop(held, reason);
  }

  finishedAck(msg: FinishedAck): void {
    const held = msg.attempt ? this.#held.get(attemptKey(msg.attempt)) : undefined;
    if (!held || held.phase !== 'ended') {
      this.#log.debug(
        { tiId: msg.attempt?.tiId, try: msg.attempt?.tryNumber },
        'FinishedAck for no ended attempt ignored',
      );
      return;
    }
    this.#forget(held);
    const ids = { tiId: held.attempt.tiId, try: held.attempt.tryNumber };
    if (msg.applied) this.#log.info(ids, 'attempt acknowledged');
    else if (msg.refused !== '')
      this.#log.error(
        { ...ids, refused: msg.refused },
        'attempt report refused as invalid (a bug in this agent): the control plane failed the attempt',
      );
    else this.#log.warn(ids, 'attempt report refused (superseded, or another end was recorded first): forgotten');
    this.#opts.changed();
  }

  /**
   * Before the first Hello: holds the attempts an earlier process of this agent left under their
   * shims (it crashed or was killed), so the Hello names them and Welcome says which to re-attach
   * to; and kills, proving them gone, the tasks an earlier process of this agent id left that
   * this one cannot re-attach to (their folder is not in this state directory: it was emptied,
   * or another was given). A Hello with a new incarnation ends every attempt it does not name,
   * and the next try may start at once: none of them may still run here. Returns how many
   * attempts it holds.
   */
  async holdLeftovers(): Promise<number> {
    const isHeld = (a: Attempt) => this.#held.get(attemptKey(a)) !== undefined;
    for (const attempt of await takeLeftovers(this.#attemptsDir, this.#opts.agentId, isHeld, this.#log)) {
      const held = this.#held.add(attempt);
      this.#leftovers.add(held.key);
      this.#slots.take(held);
    }
    if (this.#leftovers.size > 0)
      this.#log.info(
        { attempts: this.#leftovers.size },
        'attempts left by an earlier process of this agent: asking the control plane which are current',
      );
    return this.#leftovers.size;
  }

  /** Applies Welcome to the attempts named in Hello.held. */
  welcome(msg: Welcome): { resumed: number; superseded: number } {
    const resumed = new Set(msg.resumed.map(attemptKey));
    const superseded = new Set(msg.superseded.map(attemptKey));
    for (const so of msg.logsSoFar) {
      if (!so.attempt) continue;
      const key = attemptKey(so.attempt);
      this.#logsSoFar.set(key, { stdout: so.stdoutLines, stderr: so.stderrLines });
      this.#batcher.continueAfter(key, so.lastSeq);
    }
    for (const held of this.#held.all()) {
      if (superseded.has(held.key)) this.#supersede(held, 'the control plane no longer wants it (Welcome.superseded)');
      else if (!resumed.has(held.key)) {
        // Do no harm: keep it; a stale report is refused and answered with Cancel.
        this.#log.warn(
          { tiId: held.attempt.tiId, try: held.attempt.tryNumber },
          'Welcome names held attempt neither resumed nor superseded: keeping it',
        );
      }
    }
    if (this.#leftovers.size > 0) {
      // Re-attached once the control plane has said which are current: a superseded one is no
      // longer held, so its shim is stopped and nothing about it is reported.
      this.#leftovers.clear();
      void this.#executor
        .adopt()
        .catch((err: unknown) => this.#log.error({ err }, 'adopting the attempts left by an earlier process failed'));
    }
    return { resumed: resumed.size, superseded: superseded.size };
  }

  /** KeepaliveAck: the Started reports written before that Keepalive are confirmed. */
  acked(seq: number): void {
    this.outbox.confirm(seq);
  }

  /** LogAck: the attempt's lines up to `lastSeq` are stored, and need not be sent again. */
  logAcked(msg: LogAck): void {
    if (!msg.attempt) return;
    this.#batcher.release(this.outbox.confirmLog(attemptKey(msg.attempt), msg.lastSeq));
  }

  /** Answers Assigns from now on with Finished FAILED instead of running them. */
  refuseNew(reason: string): void {
    this.#refuse = reason;
  }

  /** Stops every running attempt; each is reported FAILED with `reason`. Returns how many. */
  stopAll(reason: string): number {
    const running = this.#held.running();
    for (const held of running) {
      held.stop = { kind: 'shutdown', reason };
      this.#stop(held, reason);
    }
    return running.length;
  }

  /** SIGKILLs every process group at once (the agent must exit now). */
  killAll(): void {
    for (const held of this.#slots.holders()) {
      if (held.pid === null) continue;
      try {
        process.kill(-held.pid, 'SIGKILL');
      } catch {
        // ESRCH: already gone.
      }
    }
  }

  /** Moves the buffered lines of open attempts into the outbox. */
  flushLogs(): void {
    this.#reports.flushLogs();
  }

  /** Stops the executor: waits for every process to be over (SIGTERM, then SIGKILL). */
  async close(): Promise<void> {
    this.#reports.stopFlushing();
    this.#refuse ??= 'the agent has stopped';
    await this.#executor.shutdown(0);
  }

  async #dispatch(held: HeldAttempt): Promise<void> {
    const tiId = held.attempt.tiId;
    for (let gone = this.#slots.gone(tiId); gone; gone = this.#slots.gone(tiId)) await gone;
    if (held.forgotten || held.phase !== 'running') return;
    this.#slots.take(held);
    try {
      await this.#executor.dispatch(held.attempt);
    } catch (err) {
      this.#slots.release(held.attempt);
      this.#reports.finished(held, {
        exitCode: null,
        signal: null,
        error: `not started: ${(err as Error).message}`,
        outcome: 'spawn_failed',
      });
    }
  }

  /** Stops a running attempt; one still waiting for its slot is settled as CANCELLED at once. */
  #stop(held: HeldAttempt, reason: string): void {
    if (this.#slots.holds(held)) this.#executor.cancel(held.attempt.tiId, reason);
    else if (!held.forgotten)
      this.#reports.finished(held, { exitCode: null, signal: null, error: reason, outcome: 'cancelled' });
  }

  #supersede(held: HeldAttempt, reason: string): void {
    this.#log.info(
      { tiId: held.attempt.tiId, try: held.attempt.tryNumber, reason },
      'attempt superseded: stopping it, reporting nothing more',
    );
    held.stop = { kind: 'superseded', reason };
    const wasRunning = held.phase === 'running';
    this.#forget(held);
    if (wasRunning && this.#slots.holds(held)) this.#executor.cancel(held.attempt.tiId, `superseded: ${reason}`);
    this.#opts.changed();
  }

  #forget(held: HeldAttempt): void {
    this.#held.forget(held.key);
    // A running one keeps its folder until its process is over (the executor's `finished`).
    if (held.phase === 'ended') this.#removeFolder(held.attempt);
    this.#batcher.release(this.outbox.remove(held.key));
    this.#batcher.forget(held.key);
  }

  /** The attempt's folder, once nothing about it is to be reported any more. */
  #removeFolder(attempt: Attempt): void {
    const { tiId, tryNumber, attemptToken } = attempt;
    void new AttemptDir(path.join(path.resolve(this.#attemptsDir), `${tiId}.${tryNumber}.${attemptToken}`))
      .removeLater()
      .catch((err: unknown) => this.#log.warn({ err, tiId, try: tryNumber }, 'could not remove an attempt folder'));
  }

  /** By object for the attempts started here; by key for one re-read from its folder. */
  #heldOf(attempt: Attempt): HeldAttempt | undefined {
    const held = this.#held.of(attempt);
    if (held) return held;
    const byKey = this.#held.get(attemptKey(attempt));
    return byKey && byKey.attempt.attemptToken === attempt.attemptToken ? byKey : undefined;
  }

  #reporter(): AttemptReporter {
    return {
      started: async (attempt, { pid }) => {
        const held = this.#heldOf(attempt);
        // Superseded (being stopped already, or a leftover the control plane no longer wants).
        if (!held || held.forgotten) return false;
        this.#reports.started(held, pid);
        return true;
      },
      log: (attempt, stream, line) => {
        const held = this.#heldOf(attempt);
        if (!held || held.forgotten) return;
        this.#reports.line(held, stream, line);
      },
      // Every live attempt stays current as far as the executor knows; Cancel says otherwise.
      heartbeat: async (attempts) => new Set(attempts.map((a) => a.tiId)),
      // What Welcome said, for an attempt re-attached after a restart.
      logsSoFar: async (attempt) => this.#logsSoFar.get(attemptKey(attempt)) ?? { stdout: 0, stderr: 0 },
      finished: async (attempt, result) => {
        this.#slots.release(attempt);
        const held = this.#heldOf(attempt);
        if (!held || held.forgotten) {
          this.#removeFolder(attempt);
          return;
        }
        this.#reports.finished(held, result);
      },
    };
  }
}
