import pino from 'pino';
import { claimAttempt } from '../../src/db/attempts/claim-attempt.js';
import { finishAttempt } from '../../src/db/attempts/finish-attempt.js';
import { startAttempt } from '../../src/db/attempts/start-attempt.js';
import type { Sql } from '../../src/db/sql.js';
import type { WorkItem } from '../../src/core/work-item.js';
import { createDispatchPool, type DispatchPool } from '../../src/dispatch/pool.js';
import { createSchedulerLoop, type SchedulerLoop } from '../../src/scheduler/scheduler-loop.js';
import { step } from '../../src/scheduler/step.js';
import { attemptFixtures } from './attempt-fixtures.js';
import { schedulerHarness, type PhaseError } from './scheduler-harness.js';
import { dag, task } from './spec-builders.js';

const logger = pino({ level: 'silent' });

/** The scheduler of the slow-dispatch fault test and bench (see `startSlowDispatchScheduler`). */
export interface SlowDispatchScheduler {
  loop: SchedulerLoop;
  pool: DispatchPool<WorkItem>;
  /** Seconds each step took while `recording`, as the loop reports them. */
  steps: number[];
  recording: boolean;
  errors: PhaseError[];
  stop(): Promise<void>;
}

/** Triggers a run of a wide DAG (`tasks` tasks, no dependencies): they are all scheduled at once. */
export async function triggerWide(sql: Sql, dagId: string, tasks: number): Promise<string> {
  const spec = dag(
    dagId,
    Array.from({ length: tasks }, (_, i) => task(`t${String(i).padStart(2, '0')}`)),
  );
  return (await attemptFixtures(() => sql, 'subprocess').queuedRun(spec, { logicalDate: new Date() })).run.id;
}

/**
 * The real loop, step and pool, wired as control-plane.ts wires them; only the executor is fake:
 * `dispatchMs` (a pod creation, a slow spawn) before the attempt is claimed, started and
 * finished, and the finished attempt nudges the loop. Not started yet: the caller triggers its
 * run, then starts the loop.
 */
export async function startSlowDispatchScheduler(
  sql: Sql,
  o: { workers: number; capacity: number; dispatchMs: number; tickMs: number },
): Promise<SlowDispatchScheduler> {
  // Open the pool's connections first: connecting is start-up cost, not tick cost.
  await Promise.all(Array.from({ length: 10 }, () => sql`select 1`));
  const h = schedulerHarness(sql, { offer: (item) => s.pool.offer(item), maxRunsPerStep: 1000 });
  const s: SlowDispatchScheduler = {
    steps: [],
    recording: false,
    errors: h.errors,
    loop: undefined as never,
    pool: undefined as never,
    stop: undefined as never,
  };
  s.pool = createDispatchPool<WorkItem>({
    workers: o.workers,
    capacity: o.capacity,
    key: (item) => item.tiId,
    logger,
    dispatch: async (item) => {
      await new Promise((r) => setTimeout(r, o.dispatchMs));
      const claim = await claimAttempt(sql, item.tiId, item.executor);
      if (!claim) return;
      const a = { tiId: item.tiId, tryNumber: claim.tryNumber, attemptToken: claim.attemptToken };
      await startAttempt(sql, a, { pid: null, agentId: null });
      await finishAttempt(sql, a, { exitCode: 0, signal: null, error: null, outcome: 'success' });
      s.loop.nudge();
    },
    onError: (item, err) => s.errors.push({ phase: 'dispatch', err, ids: { tiId: item.tiId } }),
  });
  s.loop = createSchedulerLoop({
    tickMs: o.tickMs,
    logger,
    step: () => step(h.ctx),
    canStep: () => true,
    onStepDone: (seconds) => {
      if (s.recording) s.steps.push(seconds);
    },
  });
  // One step on the empty database, so the statements are prepared before the clock starts.
  await step(h.ctx);
  s.stop = async () => {
    await s.loop.stop();
    await s.pool.close();
  };
  return s;
}
