import pino from 'pino';
import { describe, expect, it } from 'vitest';
import type { DagSpec, TaskSpec } from '../../src/core/dag-spec.js';
import { claimAttempt } from '../../src/db/attempts/claim-attempt.js';
import { finishAttempt } from '../../src/db/attempts/finish-attempt.js';
import { startAttempt } from '../../src/db/attempts/start-attempt.js';
import { upsertDag } from '../../src/db/dags.js';
import { createRun } from '../../src/db/runs.js';
import { createDispatchPool, type DispatchPool } from '../../src/dispatch/pool.js';
import type { WorkItem } from '../../src/core/work-item.js';
import { schedulerHarness, type PhaseError } from '../helpers/scheduler-harness.js';
import { createSchedulerLoop, type SchedulerLoop } from '../../src/scheduler/scheduler-loop.js';
import { step } from '../../src/scheduler/step.js';
import { waitFor } from '../helpers/leoflow-process.js';
import { createTestDatabase, type TestDatabase } from '../helpers/test-database.js';
import { round } from './pg-xacts.js';
import { reportRatios } from './ratios.js';
import { percentile, report } from './report.js';

/**
 * Tick under slow dispatch: 50 TIs queued at once (one run of a 50-task wide DAG), every
 * dispatch taking 500 ms (a fake executor: sleep, then the real claim/start/finish), through the
 * real scheduler loop, step and dispatch pool wired as control-plane.ts wires them (the approach
 * of test/fault/slow-dispatch.test.ts). The figure is the duration of each scheduler step while
 * the runs drain, as the loop reports it (onStepDone). The tick is 10 ms instead of 1 s so a few
 * seconds of draining give enough steps for a p99; a finished attempt also nudges the loop.
 * Pro's pool (16 drainers, queue 256): 3 runs one after the other. Lite's (1 drainer, queue 1):
 * one run, 4 s of it (the TIs the full queue refuses wait, saying why).
 */

const logger = pino({ level: 'silent' });
const DISPATCH_MS = 500;
const TASKS = 50;
const TICK_MS = 10;

function task(id: string): TaskSpec {
  return {
    id,
    command: ['true'],
    dependsOn: [],
    triggerRule: 'all_success',
    retries: 0,
    retryDelayMs: 1000,
    maxRetryDelayMs: 60_000,
    timeoutMs: null,
    env: {},
    cwd: null,
    executor: 'default',
    image: null,
    placement: null,
  };
}

async function triggerWide(db: TestDatabase, dagId: string): Promise<string> {
  const spec: DagSpec = {
    dagId,
    description: '',
    schedule: null,
    timezone: 'UTC',
    catchup: false,
    startDate: null,
    maxActiveRuns: 16,
    tags: [],
    tasks: Array.from({ length: TASKS }, (_, i) => task(`t${String(i).padStart(2, '0')}`)),
  };
  const { dag } = await upsertDag(db.sql, spec, `${dagId}.yaml`);
  const { run } = await db.sql.begin((tx) =>
    createRun(tx, {
      dagId,
      dagVersion: dag.version,
      runKey: 'manual__1',
      runType: 'manual',
      logicalDate: new Date(),
      conf: {},
      defaultExecutor: 'subprocess',
    }),
  );
  return run.id;
}

interface Scheduler {
  loop: SchedulerLoop;
  pool: DispatchPool<WorkItem>;
  steps: number[];
  recording: boolean;
  errors: PhaseError[];
  stop(): Promise<void>;
}

async function startScheduler(db: TestDatabase, workers: number, capacity: number): Promise<Scheduler> {
  await Promise.all(Array.from({ length: 10 }, () => db.sql`select 1`));
  const h = schedulerHarness(db.sql, { offer: (item) => s.pool.offer(item), maxRunsPerStep: 1000 });
  const s: Scheduler = {
    steps: [],
    recording: false,
    errors: h.errors,
    loop: undefined as never,
    pool: undefined as never,
    stop: undefined as never,
  };
  s.pool = createDispatchPool<WorkItem>({
    workers,
    capacity,
    key: (item) => item.tiId,
    logger,
    dispatch: async (item) => {
      await new Promise((r) => setTimeout(r, DISPATCH_MS));
      const claim = await claimAttempt(db.sql, item.tiId, item.executor);
      if (!claim) return;
      const a = { tiId: item.tiId, tryNumber: claim.tryNumber, attemptToken: claim.attemptToken };
      await startAttempt(db.sql, a, { pid: null, agentId: null });
      await finishAttempt(db.sql, a, { exitCode: 0, signal: null, error: null, outcome: 'success' });
      s.loop.nudge();
    },
    onError: (item, err) => s.errors.push({ phase: 'dispatch', err, ids: { tiId: item.tiId } }),
  });
  s.loop = createSchedulerLoop({
    tickMs: TICK_MS,
    logger,
    step: () => step(h.ctx),
    canStep: () => true,
    onStepDone: (seconds) => {
      if (s.recording) s.steps.push(seconds * 1000);
    },
  });
  await step(h.ctx);
  s.stop = async () => {
    await s.loop.stop();
    await s.pool.close();
  };
  return s;
}

const runState = async (db: TestDatabase, runId: string) =>
  (await db.sql<{ state: string }[]>`select state from dag_runs where id = ${runId}`)[0]!.state;

describe('tick under slow dispatch', () => {
  it('measures step durations with 50 TIs queued and 500 ms dispatches', async () => {
    const db = await createTestDatabase();
    const rows: Record<string, string | number>[] = [];
    const raw: Record<string, number[]> = {};
    try {
      // Pro pool: three rounds, each 50 TIs at once, drained.
      let s = await startScheduler(db, 16, 256);
      try {
        s.loop.start();
        const drained: number[] = [];
        for (let round = 0; round < 3; round++) {
          const runId = await triggerWide(db, `slow_pro_${round}`);
          const t = performance.now();
          s.recording = true;
          s.loop.nudge();
          await waitFor(`run ${round} success`, async () => (await runState(db, runId)) === 'success', 30_000, 20);
          s.recording = false;
          drained.push(performance.now() - t);
        }
        expect(s.errors).toEqual([]);
        raw.pro = s.steps;
        rows.push({
          pool: 'Pro (16 drainers, queue 256)',
          steps: s.steps.length,
          'tick p50 ms': round(percentile(s.steps, 50), 2),
          'tick p99 ms': round(percentile(s.steps, 99), 2),
          'tick max ms': round(Math.max(...s.steps), 2),
          'run drained in ms (median of 3)': round([...drained].sort((a, b) => a - b)[1]!, 0),
        });
      } finally {
        await s.stop();
      }
      await db.sql`delete from dags`;
      // Lite pool: 4 s of one run (the whole drain would take 25 s).
      s = await startScheduler(db, 1, 1);
      try {
        await triggerWide(db, 'slow_lite');
        s.recording = true;
        s.loop.start();
        await new Promise((r) => setTimeout(r, 4000));
        s.recording = false;
        expect(s.errors).toEqual([]);
        raw.lite = s.steps;
        rows.push({
          pool: 'Lite (1 drainer, queue 1)',
          steps: s.steps.length,
          'tick p50 ms': round(percentile(s.steps, 50), 2),
          'tick p99 ms': round(percentile(s.steps, 99), 2),
          'tick max ms': round(Math.max(...s.steps), 2),
          'run drained in ms (median of 3)': 'not waited (25 s)',
        });
      } finally {
        await s.stop();
      }
      await report('slow-dispatch', rows, {
        tasks: TASKS,
        dispatchMs: DISPATCH_MS,
        tickMs: TICK_MS,
        goalP99Ms: 100,
        steps: raw,
      });
      await reportRatios();
    } finally {
      await db.drop();
    }
  });
});
