import type { Logger } from 'pino';
import type { EndsSentPort } from '../db/attempts/ends-sent-port.js';
import type { Sql } from '../db/sql.js';
import type { Dispatcher } from '../dispatch/dispatcher.js';
import type { RunRead } from './planner-memory.js';
import { createCanceller, type CancelAttempt } from './canceller.js';
import type { SchedulerCounters } from './context.js';
import { createHistoryKeeper } from './history-keeper.js';
import { createHistoryRound, type HistoryKeeperCounters } from './history-round.js';
import { createLeaderElector, type LeaderElector } from './leader.js';
import { createNudger, type Nudge } from './nudger.js';
import { registerPlanBehindEnds } from './plan-ahead.js';
import { PlannerMemory } from './planner-memory.js';
import { offerRefusedAsRoomFrees, RoomWaiters } from './room-waiters.js';
import { createSchedulerLoop, fullStepLateMs, type SchedulerLoop } from './scheduler-loop.js';
import { step } from './step.js';

/** At most this many active runs are planned per step. */
const MAX_RUNS_PER_STEP = 1000;
/**
 * A full step (one a tick) sweeps this many running runs on from where the last one stopped:
 * every running run is looked at within ceil(running runs / 200) ticks (25 s with 5,000 at the
 * 1 s tick), for the safety net; what happens to a run (an end, a trigger, a retry due, a reap)
 * names it and plans it at once.
 */
const SWEEP_RUNS_PER_STEP = 200;

export interface SchedulerOptions {
  sql: Sql;
  /** For the leader's lock session, outside the pool. */
  databaseUrl: string;
  replicaId: string;
  logger: Logger;
  dispatcher: Dispatcher;
  /** The ends the report batcher sends: on the leader, the plans of their runs ride behind them. */
  endsSent: EndsSentPort;
  tickMs: number;
  leaderWatchdogMs: number;
  runOrphanThresholdMs: number;
  heartbeatThresholdMs: number;
  /** How long past its timeout a running attempt may go before the leader ends it itself. */
  timeoutGraceMs: number;
  defaultExecutor: string;
  counters: SchedulerCounters;
  /** Finished runs are removed this long after they ended (null: kept); see history-keeper.ts. */
  retentionMs: number | null;
  /** Agents with no live stream and no attempt are forgotten this long after last seen; null: never. */
  agentRetentionMs: number | null;
  /** A stream is live while its agent was seen this recently. */
  agentLiveMs: number;
  historyCounters: HistoryKeeperCounters;
  /** False for a replica that never leads (role worker or observer): it never campaigns. */
  campaigns: boolean;
  /** What the scheduler reports to metrics: each step's duration, and whether it leads. */
  observe: { stepped(seconds: number): void; leading(yes: boolean): void };
}

export interface Scheduler {
  /** Asks the leader, here or on another replica, to step (for these runs when named). */
  readonly nudge: Nudge;
  /** Asks for a step that starts at least this many queued runs (this replica leads). */
  nudgeQueued(atLeast: number): void;
  /** A run was created here: on the leader, the step plans it from the rows that created it. */
  runCreated(read: RunRead): void;
  /** Another replica said these runs (all when absent) changed. */
  notified(runIds?: string[]): void;
  /** Stops an attempt wherever it runs: here at once, on another replica over NOTIFY. */
  readonly cancel: CancelAttempt;
  /** Another replica asked for an attempt to be stopped (the payload of its notification). */
  cancelNotified(payload: string): void;
  readonly leader: LeaderElector;
  /** Resolves true once this replica leads, or false when `timeoutMs` passes first. */
  leadership(timeoutMs: number): Promise<boolean>;
  /** The loop's progress, for the liveness probe (see SchedulerLoop.progress). */
  loopProgress(): { at: number; stepSince: number | null; lastFullAt: number | null };
  start(): void;
  /** No new steps; waits for the step in progress. */
  stop(): Promise<void>;
  /** Gives up the leader lock (once what this replica ran is recorded). */
  resign(): Promise<void>;
}

/**
 * The scheduler of one replica: the planner's memory, the step's context, the loop that runs the
 * phases, the leader election that lets it step, and the nudges that wake it. Every replica has
 * one; only the leader steps.
 */
export class ReplicaScheduler implements Scheduler {
  readonly nudge: Nudge;
  readonly cancel: CancelAttempt;
  readonly leader: LeaderElector;
  readonly #o: SchedulerOptions;
  readonly #memory = new PlannerMemory(MAX_RUNS_PER_STEP);
  readonly #canceller: ReturnType<typeof createCanceller>;
  readonly #loop: SchedulerLoop;
  readonly #history: ReturnType<typeof createHistoryKeeper>;
  #isLeader = false;
  #stopping = false;
  readonly #electedWaiters = new Set<() => void>();

  constructor(o: SchedulerOptions) {
    this.#o = o;
    const logger = o.logger.child({ component: 'scheduler' });
    const memory = this.#memory;
    const roomWaiters = new RoomWaiters();
    this.#canceller = createCanceller({ sql: o.sql, logger, dispatcher: o.dispatcher });
    this.cancel = this.#canceller.cancel;
    const ctx = {
      sql: o.sql,
      logger,
      now: () => new Date(),
      dispatcher: o.dispatcher,
      defaultExecutor: o.defaultExecutor,
      counters: o.counters,
      maxRunsPerStep: MAX_RUNS_PER_STEP,
      sweepRunsPerStep: SWEEP_RUNS_PER_STEP,
      sweep: { cursor: '0' },
      memory,
      heldBackDags: new Set<string>(),
      roomWaiters,
      runOrphanThresholdMs: o.runOrphanThresholdMs,
      heartbeatThresholdMs: o.heartbeatThresholdMs,
      timeoutGraceMs: o.timeoutGraceMs,
      cancel: this.cancel,
      health: { healthySince: new Date() },
      wakeAt: (at: Date) => this.#loop.wakeAt(at),
      nudge: (runIds: string[]) => this.#loop.nudge(runIds),
    };
    // On the leader, the plans ahead of the ends the batcher writes and the reads of their runs,
    // for the step that follows, go in the same round trip as the ends' write.
    registerPlanBehindEnds(o.endsSent, ctx, { leading: () => this.#isLeader, stopping: () => this.#stopping });
    const refusedWork = offerRefusedAsRoomFrees(roomWaiters, o.dispatcher, (runIds) => this.#loop.nudge(runIds));
    this.#loop = createSchedulerLoop({
      tickMs: o.tickMs,
      logger,
      step: (kind, target) => refusedWork.around(() => step(ctx, kind, target)),
      canStep: () => this.#isLeader,
      onStepDone: (seconds) => o.observe.stepped(seconds),
    });
    // Beside the loop, not in it: removing history (and forgetting agents) must never lengthen a step.
    this.#history = createHistoryKeeper({
      round: createHistoryRound({
        sql: o.sql,
        logger,
        retentionMs: o.retentionMs,
        agentRetentionMs: o.agentRetentionMs,
        agentLiveMs: o.agentLiveMs,
        now: () => new Date(),
        counters: o.historyCounters,
      }),
      leading: () => this.#isLeader && !this.#stopping,
      failed: (err) => o.historyCounters.error(err, { what: 'round' }),
    });
    this.nudge = createNudger({
      sql: o.sql,
      logger,
      isLeader: () => this.#isLeader,
      step: (runIds) => this.#loop.nudge(runIds),
      changed: (runIds) => memory.changed(runIds),
    });
    this.leader = createLeaderElector({
      databaseUrl: o.databaseUrl,
      replicaId: o.replicaId,
      logger,
      watchdogMs: o.leaderWatchdogMs,
      retryMs: 1000,
      stepReport: () => {
        const at = this.#loop.progress().lastFullAt;
        return at === null ? null : { lastFullStepAt: at, lateMs: fullStepLateMs(at, o.tickMs) };
      },
      onElected: () => {
        // A replica that did not lead did not step, so it saw no failing phase even if Postgres
        // was down the whole time (a lost lock session is usually that): heartbeats may not have
        // been writable either. Give them a full threshold to catch up before reaping.
        ctx.health.healthySince = new Date();
        this.#isLeader = true;
        o.observe.leading(true);
        for (const w of this.#electedWaiters) w();
        this.#loop.nudge();
      },
      onDeposed: () => {
        this.#isLeader = false;
        memory.clear();
        refusedWork.clear();
        o.dispatcher.forgetParked();
        o.observe.leading(false);
      },
    });
  }

  nudgeQueued(atLeast: number): void {
    // Only the leader places work, so only the leader is asked for more.
    if (this.#isLeader) this.#loop.nudgeQueued(atLeast);
  }

  runCreated(read: RunRead): void {
    if (!this.#isLeader) return this.nudge([read.run.id]);
    this.#memory.keepRead(read);
    this.#loop.nudge([read.run.id]);
  }

  notified(runIds?: string[]): void {
    this.#memory.changed(runIds);
    this.#loop.nudge(runIds);
  }

  cancelNotified(payload: string): void {
    this.#canceller.notified(payload);
  }

  leadership(timeoutMs: number): Promise<boolean> {
    return new Promise<boolean>((resolve) => {
      if (this.#isLeader) return resolve(true);
      const done = (yes: boolean) => {
        clearTimeout(timer);
        this.#electedWaiters.delete(elected);
        resolve(yes);
      };
      const elected = () => done(true);
      const timer = setTimeout(() => done(false), timeoutMs);
      this.#electedWaiters.add(elected);
    });
  }

  loopProgress(): { at: number; stepSince: number | null; lastFullAt: number | null } {
    return this.#loop.progress();
  }

  start(): void {
    this.#loop.start();
    this.#history.start();
    if (this.#o.campaigns) this.leader.start();
  }

  async stop(): Promise<void> {
    // Planning ahead is stepping: a replica that is stopping plans nothing new.
    this.#stopping = true;
    await Promise.all([this.#loop.stop(), this.#history.stop()]);
  }

  resign(): Promise<void> {
    return this.leader.stop();
  }
}

export function createScheduler(o: SchedulerOptions): Scheduler {
  return new ReplicaScheduler(o);
}
