import { describe, expect, it } from 'vitest';
import { step } from '../../src/scheduler/step.js';
import { createTestDatabase, type TestDatabase } from '../helpers/test-database.js';
import { round } from './pg-xacts.js';
import { reportRatios } from './ratios.js';
import { percentile, report } from './report.js';
import { runSucceeds } from './run-succeeds.js';
import { startSlowDispatchScheduler, triggerWide as triggerWideRun } from '../helpers/slow-dispatch-scheduler.js';

/**
 * Tick under slow dispatch: 50 TIs queued at once (one run of a 50-task wide DAG), every
 * dispatch taking 500 ms (a fake executor: sleep, then the real claim/start/finish), through the
 * real scheduler loop, step and dispatch pool wired as control-plane.ts wires them (the approach
 * of test/timing/slow-dispatch.test.ts). The figure is the duration of each scheduler step while
 * the runs drain, as the loop reports it (onStepDone). The tick is 10 ms instead of 1 s so a few
 * seconds of draining give enough steps for a p99; a finished attempt also nudges the loop.
 * Pro's pool (16 drainers, queue 256): 3 runs one after the other. Lite's (1 drainer, queue 1):
 * one run, 4 s of it (the TIs the full queue refuses wait, saying why).
 */

const DISPATCH_MS = 500;
const TASKS = 50;
const TICK_MS = 10;

const triggerWide = (db: TestDatabase, dagId: string) => triggerWideRun(db.sql, dagId, TASKS);

const startScheduler = (db: TestDatabase, workers: number, capacity: number) =>
  startSlowDispatchScheduler(db.sql, { workers, capacity, dispatchMs: DISPATCH_MS, tickMs: TICK_MS });

/** The table's row for one pool: its steps' durations (ms) and how long a run took to drain. */
const poolRow = (pool: string, ms: number[], drained: string | number) => ({
  pool,
  steps: ms.length,
  'tick p50 ms': round(percentile(ms, 50), 2),
  'tick p99 ms': round(percentile(ms, 99), 2),
  'tick max ms': round(Math.max(...ms), 2),
  'run drained in ms (median of 3)': drained,
});

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
          await runSucceeds(db.sql, runId, 30_000, 20);
          s.recording = false;
          drained.push(performance.now() - t);
        }
        expect(s.errors).toEqual([]);
        const msPro = s.steps.map((seconds) => seconds * 1000);
        raw.pro = msPro;
        rows.push(poolRow('Pro (16 drainers, queue 256)', msPro, round([...drained].sort((a, b) => a - b)[1]!, 0)));
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
        const msLite = s.steps.map((seconds) => seconds * 1000);
        raw.lite = msLite;
        rows.push(poolRow('Lite (1 drainer, queue 1)', msLite, 'not waited (25 s)'));
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
