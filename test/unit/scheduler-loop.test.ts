import pino from 'pino';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { createSchedulerLoop, type SchedulerLoop, type StepTarget } from '../../src/scheduler/scheduler-loop.js';

const logger = pino({ level: 'silent' });
/** How long a step takes, in the steps below: on the fake clock. */
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
let loop: SchedulerLoop | undefined;
// The loop's tick, wakeAt and nudges are setTimeout/setImmediate, and it tells full steps from
// light ones by Date.now(): all on the fake clock, moved on by the tests.
beforeEach(() => {
  vi.useFakeTimers();
});
afterEach(async () => {
  const stopping = loop?.stop();
  loop = undefined;
  // A step still sleeping on the fake clock ends once its time has passed.
  await vi.advanceTimersByTimeAsync(10);
  await stopping;
  vi.useRealTimers();
});

describe('scheduler loop', () => {
  it('steps on the tick, and not at all while it may not step', async () => {
    let steps = 0;
    let leader = false;
    loop = createSchedulerLoop({ tickMs: 30, logger, canStep: () => leader, step: async () => void steps++ });
    loop.start();
    await vi.advanceTimersByTimeAsync(100);
    expect(steps).toBe(0);
    leader = true;
    await vi.advanceTimersByTimeAsync(100);
    expect(steps).toBeGreaterThanOrEqual(2);
  });

  it('coalesces a burst of nudges during a step into one more step', async () => {
    const starts: number[] = [];
    let release!: () => void;
    loop = createSchedulerLoop({
      tickMs: 10_000,
      logger,
      canStep: () => true,
      step: async () => {
        starts.push(Date.now());
        if (starts.length === 1) await new Promise<void>((r) => (release = r));
      },
    });
    loop.start();
    await vi.advanceTimersByTimeAsync(20);
    expect(starts).toHaveLength(1);
    for (let i = 0; i < 10; i++) loop.nudge();
    release();
    await vi.advanceTimersByTimeAsync(50);
    expect(starts).toHaveLength(2);
  });

  it('steps at a requested time before the tick (a retry coming due), and never two at once', async () => {
    const starts: number[] = [];
    let inStep = 0;
    let overlap = false;
    loop = createSchedulerLoop({
      tickMs: 10_000,
      logger,
      canStep: () => true,
      step: async () => {
        overlap ||= inStep > 0;
        inStep++;
        starts.push(Date.now());
        await sleep(5);
        inStep--;
      },
    });
    loop.start();
    await vi.advanceTimersByTimeAsync(20);
    const t0 = Date.now();
    loop.wakeAt(new Date(t0 + 80));
    loop.wakeAt(new Date(t0 + 300)); // later than the one pending: ignored
    await vi.advanceTimersByTimeAsync(200);
    expect(starts).toHaveLength(2);
    expect(starts[1]! - t0).toBeGreaterThanOrEqual(70);
    expect(starts[1]! - t0).toBeLessThan(180);
    expect(overlap).toBe(false);
  });

  it('keeps stepping after a step throws', async () => {
    let steps = 0;
    loop = createSchedulerLoop({
      tickMs: 20,
      logger,
      canStep: () => true,
      step: async () => {
        steps++;
        throw new Error('boom');
      },
    });
    loop.start();
    await vi.advanceTimersByTimeAsync(100);
    expect(steps).toBeGreaterThanOrEqual(3);
  });
});

describe('full and light steps', () => {
  it('runs a full step at least once per tick however many nudges arrive, and light ones between', async () => {
    const kinds: { kind: string; at: number }[] = [];
    loop = createSchedulerLoop({
      tickMs: 100,
      logger,
      canStep: () => true,
      step: async (kind) => {
        kinds.push({ kind, at: Date.now() });
        await sleep(2);
      },
    });
    loop.start();
    const until = Date.now() + 450;
    while (Date.now() < until) {
      loop.nudge();
      await vi.advanceTimersByTimeAsync(5);
    }
    const full = kinds.filter((k) => k.kind === 'full');
    expect(kinds.filter((k) => k.kind === 'light').length).toBeGreaterThan(10);
    expect(full.length).toBeGreaterThanOrEqual(4);
    for (let i = 1; i < full.length; i++) expect(full[i]!.at - full[i - 1]!.at).toBeLessThan(200);
  });
});

describe('targeted steps', () => {
  /** A loop with a long tick whose steps record what they were asked to plan (`during`: then
   *  awaited inside the step). */
  function recording(during?: (targets: StepTarget[]) => Promise<void>): { targets: StepTarget[]; l: SchedulerLoop } {
    const targets: StepTarget[] = [];
    const l = createSchedulerLoop({
      tickMs: 10_000,
      logger,
      canStep: () => true,
      step: async (_kind, target) => {
        targets.push(target);
        await during?.(targets);
      },
    });
    loop = l; // stopped after each test
    return { targets, l };
  }

  it('plans only the runs named by the nudges since the last step, merged; an unnamed nudge asks for every run', async () => {
    let release!: () => void;
    const { targets, l } = recording(async (t) => {
      if (t.length === 2) await new Promise<void>((r) => (release = r));
    });
    l.start(); // the first step after start plans every run (full)
    await vi.advanceTimersByTimeAsync(20);
    l.nudge(['7']);
    await vi.advanceTimersByTimeAsync(20); // step 2 (light, run 7) is held open
    l.nudge(['8', '9']);
    l.nudge(['9']);
    release();
    await vi.advanceTimersByTimeAsync(20);
    l.nudge(['10']);
    l.nudge();
    await vi.advanceTimersByTimeAsync(20);
    // Run 10 is planned right after the step of everything: that step reads the runs with work
    // waiting, which run 10 (a TI of it ended, say) may not be.
    expect(targets).toEqual([
      { all: true, asked: true },
      { all: false, runIds: ['7'], queued: 0 },
      { all: false, runIds: ['8', '9'], queued: 0 },
      { all: true, asked: true },
      { all: false, runIds: ['10'], queued: 0 },
    ]);
  });

  it('keeps the runs named by nudges that a tick’s full step took in for a step right after it', async () => {
    let release!: () => void;
    const { targets, l } = recording(async (t) => {
      if (t.length === 2) await new Promise<void>((r) => (release = r));
    });
    l.start();
    await vi.advanceTimersByTimeAsync(20);
    l.nudge(['1']);
    await vi.advanceTimersByTimeAsync(20); // step 2 (light, run 1) is held open past the tick
    await vi.advanceTimersByTimeAsync(10_000);
    l.nudge(['3']);
    l.nudgeQueued(2);
    release();
    // The tick is due, so the nudged step is a full one, which reads neither run 3 nor queued runs by name.
    await vi.advanceTimersByTimeAsync(20);
    expect(targets).toEqual([
      { all: true, asked: true },
      { all: false, runIds: ['1'], queued: 0 },
      { all: true, asked: false },
      { all: false, runIds: ['3'], queued: 2 },
    ]);
  });

  it('asks a step for the oldest queued runs when nudged for them (the largest ask), merged with the named runs', async () => {
    const { targets, l } = recording();
    l.start();
    await vi.advanceTimersByTimeAsync(20);
    l.nudgeQueued(3);
    await vi.advanceTimersByTimeAsync(20);
    l.nudgeQueued(2);
    l.nudge(['4']);
    l.nudgeQueued(5);
    l.nudgeQueued(1);
    await vi.advanceTimersByTimeAsync(20);
    expect(targets).toEqual([
      { all: true, asked: true },
      { all: false, runIds: [], queued: 3 },
      { all: false, runIds: ['4'], queued: 5 },
    ]);
  });
});
