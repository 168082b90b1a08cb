import pino from 'pino';
import { describe, expect, it, vi } from 'vitest';
import type { AttemptResult } from '../../src/core/attempt.js';
import type { DagSpec } from '../../src/core/dag-spec.js';
import { claimAttempt } from '../../src/db/attempts/claim-attempt.js';
import { finishAttempt, type FinishVerdict } from '../../src/db/attempts/finish-attempt.js';
import { startAttempt } from '../../src/db/attempts/start-attempt.js';
import { getDag, upsertDag } from '../../src/db/dags.js';
import { createRun, getRun, type RunRow } from '../../src/db/runs.js';
import { createSql } from '../../src/db/sql.js';
import { listTis, type TiRow } from '../../src/db/tis.js';
import { createDispatchPool } from '../../src/dispatch/pool.js';
import type { WorkItem } from '../../src/core/work-item.js';
import { createScheduledRuns } from '../../src/scheduler/phases/create-scheduled-runs.js';
import { PlannerMemory } from '../../src/scheduler/planner-memory.js';
import { RoomWaiters } from '../../src/scheduler/room-waiters.js';
import { step } from '../../src/scheduler/step.js';
import { databaseForFile } from '../helpers/test-database.js';
import { dag, task as baseTask } from '../helpers/spec-builders.js';
import { schedulerHarness, type HarnessOptions, type SchedulerHarness } from '../helpers/scheduler-harness.js';
import { TEST_WAIT_REASON as WAIT_REASON } from '../helpers/test-dispatcher.js';
import { attemptFixtures } from '../helpers/attempt-fixtures.js';

/** This file's tasks echo their id unless told otherwise. */
const task: typeof baseTask = (id, over = {}) => baseTask(id, { command: ['sh', '-c', `echo ${id}`], ...over });

const logger = pino({ level: 'silent' });
const BOUND = { timeout: 15_000 };

// The planner looks at every active run of the database: start each test from an empty one.
const db = databaseForFile({ emptyEach: true });

const harness = (over: HarnessOptions = {}) => schedulerHarness(db.sql, over);

/** Steps once and checks the step itself reported no failed phase. */
async function stepOk(h: SchedulerHarness) {
  const r = await step(h.ctx);
  expect(r.failedPhases).toEqual([]);
  expect(r.plan).not.toBeNull();
  return r.plan!;
}

const fixtures = attemptFixtures(() => db.sql, 'subprocess');
const trigger = async (spec: DagSpec, conf: Record<string, unknown> = {}): Promise<RunRow> =>
  (await fixtures.queuedRun(spec, { conf })).run;

async function tiMap(runId: string): Promise<Map<string, TiRow>> {
  return new Map((await listTis(db.sql, runId)).map((t) => [t.task_id, t]));
}
async function states(runId: string): Promise<Record<string, string>> {
  return Object.fromEntries((await listTis(db.sql, runId)).map((t) => [t.task_id, t.state]));
}
async function runState(runId: string) {
  return (await getRun(db.sql, runId))!.state;
}

const OK: AttemptResult = { exitCode: 0, signal: null, error: null, outcome: 'success' };
const FAIL: AttemptResult = { exitCode: 2, signal: null, error: 'exit code 2', outcome: 'failed' };

/** What an executor does with a scheduled TI: claim it, start it, finish it. */
async function execute(tiId: string, result: AttemptResult, executor = 'subprocess'): Promise<FinishVerdict> {
  const claim = await claimAttempt(db.sql, tiId, executor);
  expect(claim, `claim of TI ${tiId}`).not.toBeNull();
  const a = { tiId, tryNumber: claim!.tryNumber, attemptToken: claim!.attemptToken };
  expect(await startAttempt(db.sql, a, { pid: 1234, agentId: null })).toBe(true);
  return finishAttempt(db.sql, a, result);
}
async function executeTask(runId: string, taskId: string, result: AttemptResult) {
  return execute((await tiMap(runId)).get(taskId)!.id, result);
}

describe('plan', () => {
  it('claims with the move when the pool can take every TI it offers, and offers them claimed', BOUND, async () => {
    const spec = dag('p_claim', [task('a'), task('b'), task('c', { dependsOn: ['a', 'b'] })]);
    const run = await trigger(spec);
    const asked: string[] = [];
    const h = harness({ claimRoom: { room: (executor) => (asked.push(executor), 2) } });
    const r = await stepOk(h);
    expect(r).toMatchObject({ runsStarted: 1, offered: 2, errors: 0 });
    expect(asked).toEqual(['subprocess']);
    const tis = await tiMap(run.id);
    expect(tis.get('a')).toMatchObject({ state: 'queued', try_number: 1 });
    expect(tis.get('b')).toMatchObject({ state: 'queued', try_number: 1 });
    const items = new Map(h.offered.map((i) => [i.taskId, i]));
    expect(items.get('a')!.claim).toEqual({
      tryNumber: 1,
      maxTries: 1,
      attemptToken: tis.get('a')!.attempt_token,
      dispatchKey: `p_claim-${run.id}-a-1`,
      agentId: null,
    });
    expect(items.get('b')!.claim?.attemptToken).toBe(tis.get('b')!.attempt_token);
  });

  it('claims nothing ahead when the pool has room for fewer TIs than the step offers', BOUND, async () => {
    const spec = dag('p_noclaim', [task('a'), task('b')]);
    const run = await trigger(spec);
    const h = harness({ claimRoom: { room: () => 1 } });
    expect(await stepOk(h)).toMatchObject({ runsStarted: 1, offered: 2, errors: 0 });
    const tis = await tiMap(run.id);
    expect([tis.get('a')!.state, tis.get('b')!.state]).toEqual(['scheduled', 'scheduled']);
    expect(h.offered.map((i) => i.claim)).toEqual([undefined, undefined]);
  });

  it('starts a queued run, schedules and offers its root tasks', BOUND, async () => {
    const spec = dag('p_start', [task('a'), task('b'), task('c', { dependsOn: ['a', 'b'] })]);
    const run = await trigger(spec, { k: 'v' });
    expect(run.state).toBe('queued');
    const h = harness();

    const r = await stepOk(h);
    expect(r).toMatchObject({ runsStarted: 1, runsAdvanced: 1, runsFinalized: 0, offered: 2, errors: 0 });
    const row = (await getRun(db.sql, run.id))!;
    expect(row.state).toBe('running');
    expect(row.started_at).toBeInstanceOf(Date);
    const tis = await tiMap(run.id);
    expect(tis.get('a')).toMatchObject({ state: 'scheduled', pending_reason: null, executor: 'subprocess' });
    expect(tis.get('b')).toMatchObject({ state: 'scheduled', pending_reason: null });
    expect(tis.get('c')).toMatchObject({ state: 'none', pending_reason: 'UPSTREAM_RUNNING' });
    expect(h.offered.map((i) => i.taskId).sort()).toEqual(['a', 'b']);
    const item = h.offered.find((i) => i.taskId === 'a')!;
    expect(item).toEqual({
      tiId: tis.get('a')!.id,
      runId: run.id,
      dagId: 'p_start',
      taskId: 'a',
      executor: 'subprocess',
      task: spec.tasks[0],
      pendingReason: null,
      conf: { k: 'v' },
      logicalDate: new Date('2026-02-01T00:00:00Z'),
      // The run's own trace, which the attempts' spans are children of.
      runTrace: { traceparent: row.traceparent, tracestate: null },
    });
    expect(row.traceparent).toMatch(/^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/);
    expect(h.errors).toEqual([]);

    // Nothing claimed them: the next step offers the same TIs again and moves nothing.
    h.offered.length = 0;
    const r2 = await stepOk(h);
    expect(r2).toMatchObject({ runsStarted: 0, offered: 2 });
    expect(h.offered.map((i) => i.taskId).sort()).toEqual(['a', 'b']);
    expect(await states(run.id)).toEqual({ a: 'scheduled', b: 'scheduled', c: 'none' });
  });

  it('advances a diamond DAG step by step to success through a real dispatch pool', BOUND, async () => {
    const spec = dag('p_diamond', [
      task('a'),
      task('b', { dependsOn: ['a'] }),
      task('c', { dependsOn: ['a'] }),
      task('d', { dependsOn: ['b', 'c'] }),
    ]);
    const run = await trigger(spec);
    const order: string[] = [];
    const pool = createDispatchPool<WorkItem>({
      workers: 2,
      capacity: 8,
      key: (i) => i.tiId,
      logger,
      dispatch: async (item) => {
        const claim = await claimAttempt(db.sql, item.tiId, item.executor);
        if (!claim) return;
        order.push(item.taskId);
        const a = { tiId: item.tiId, tryNumber: claim.tryNumber, attemptToken: claim.attemptToken };
        await startAttempt(db.sql, a, { pid: 1, agentId: null });
        await finishAttempt(db.sql, a, OK);
      },
    });
    const h = harness({ offer: (item) => pool.offer(item) });
    try {
      let steps = 0;
      while ((await runState(run.id)) === 'running' || (await runState(run.id)) === 'queued') {
        expect(++steps, 'run did not finish within 6 steps').toBeLessThanOrEqual(6);
        await stepOk(h);
        await vi.waitFor(() => expect(pool.depth + pool.inFlight).toBe(0), { timeout: 5000, interval: 5 });
      }
      // a; b and c; d; finalize.
      expect(steps).toBe(4);
    } finally {
      await pool.close();
    }
    expect(await runState(run.id)).toBe('success');
    expect(order[0]).toBe('a');
    expect(order.slice(1, 3).sort()).toEqual(['b', 'c']);
    expect(order[3]).toBe('d');
    expect(order).toHaveLength(4);
    for (const ti of await listTis(db.sql, run.id)) {
      expect(ti).toMatchObject({ state: 'success', try_number: 1 });
      const evs = await db.sql<
        { to: string }[]
      >`select payload->>'to' as to from events where ti_id = ${ti.id} and kind = 'ti.state' order by seq`;
      expect(
        evs.map((e) => e.to),
        ti.task_id,
      ).toEqual(['scheduled', 'queued', 'running', 'success']);
    }
    expect(h.errors).toEqual([]);
  });

  it('propagates a failure as upstream_failed and ends the run failed once nothing is running', BOUND, async () => {
    const spec = dag('p_fail', [
      task('a'),
      task('b', { dependsOn: ['a'] }),
      task('c', { dependsOn: ['b'] }),
      task('d'),
    ]);
    const run = await trigger(spec);
    const h = harness();
    await stepOk(h);
    expect(await states(run.id)).toEqual({ a: 'scheduled', b: 'none', c: 'none', d: 'scheduled' });

    expect(await executeTask(run.id, 'a', FAIL)).toBe('failed');
    // d is still in flight: started, not finished.
    const dId = (await tiMap(run.id)).get('d')!.id;
    const claim = (await claimAttempt(db.sql, dId, 'subprocess'))!;
    const dAttempt = { tiId: dId, tryNumber: claim.tryNumber, attemptToken: claim.attemptToken };
    await startAttempt(db.sql, dAttempt, { pid: 1, agentId: null });

    const r = await stepOk(h);
    expect(await states(run.id)).toEqual({ a: 'failed', b: 'upstream_failed', c: 'upstream_failed', d: 'running' });
    expect(r.runsFinalized).toBe(0);
    expect(await runState(run.id)).toBe('running');
    const tis = await tiMap(run.id);
    expect(tis.get('b')!.ended_at).toBeInstanceOf(Date);
    expect(tis.get('c')!.ended_at).toBeInstanceOf(Date);

    expect(await finishAttempt(db.sql, dAttempt, OK)).toBe('success');
    const r2 = await stepOk(h);
    expect(r2.runsFinalized).toBe(1);
    const row = (await getRun(db.sql, run.id))!;
    expect(row.state).toBe('failed');
    expect(row.ended_at).toBeInstanceOf(Date);
    // An ended run is no longer planned.
    const r3 = await stepOk(h);
    expect(r3.runsAdvanced).toBe(0);
  });

  it('waits for a retry backoff with a reason, then reschedules when due', BOUND, async () => {
    const spec = dag('p_retry', [
      task('a', { retries: 1, retryDelayMs: 60_000, maxRetryDelayMs: 600_000 }),
      task('b', { dependsOn: ['a'] }),
    ]);
    const run = await trigger(spec);
    const h = harness();
    await stepOk(h);
    expect(await executeTask(run.id, 'a', FAIL)).toBe('up_for_retry');
    const nextTryAt = (await tiMap(run.id)).get('a')!.next_try_at!;
    expect(nextTryAt.getTime()).toBeGreaterThan(Date.now() + 50_000);

    h.offered.length = 0;
    h.clock.now = new Date(nextTryAt.getTime() - 1);
    const wakes: Date[] = [];
    h.ctx.wakeAt = (at) => wakes.push(at);
    const r = await stepOk(h);
    // The loop is asked to step when the backoff ends, not at some later tick.
    expect(wakes).toEqual([nextTryAt]);
    expect(r.offered).toBe(0);
    expect(h.offered).toEqual([]);
    let a = (await tiMap(run.id)).get('a')!;
    expect(a.state).toBe('up_for_retry');
    expect(a.pending_reason).toBe(`RETRY_BACKOFF_UNTIL:${nextTryAt.toISOString()}`);
    expect((await tiMap(run.id)).get('b')!.pending_reason).toBe('UPSTREAM_RUNNING');
    expect(await runState(run.id)).toBe('running');

    h.clock.now = nextTryAt;
    const r2 = await stepOk(h);
    expect(r2.offered).toBe(1);
    expect(h.offered.map((i) => i.taskId)).toEqual(['a']);
    a = (await tiMap(run.id)).get('a')!;
    expect(a).toMatchObject({ state: 'scheduled', pending_reason: null, try_number: 1 });

    expect(await execute(a.id, OK)).toBe('success');
    expect((await tiMap(run.id)).get('a')!.try_number).toBe(2);
    await stepOk(h);
    expect(await executeTask(run.id, 'b', OK)).toBe('success');
    await stepOk(h);
    expect(await runState(run.id)).toBe('success');
  });

  it('keeps a second run queued with MAX_ACTIVE_RUNS until the first ends', BOUND, async () => {
    const spec = dag('p_max', [task('a')], { maxActiveRuns: 1 });
    const r1 = await trigger(spec);
    const r2 = await trigger(spec);
    const h = harness();

    for (let i = 0; i < 2; i++) {
      const r = await stepOk(h);
      expect(r.runsStarted).toBe(i === 0 ? 1 : 0);
      expect(await runState(r1.id)).toBe('running');
      expect(await runState(r2.id)).toBe('queued');
      for (const ti of await listTis(db.sql, r2.id))
        expect(ti).toMatchObject({ state: 'none', pending_reason: 'MAX_ACTIVE_RUNS' });
      expect(h.offered.every((it) => it.runId === r1.id)).toBe(true);
    }

    expect(await executeTask(r1.id, 'a', OK)).toBe('success');
    // One step finalizes the first run and starts the second: the freed slot is used at once.
    const r = await stepOk(h);
    expect(r.runsFinalized).toBe(1);
    expect(r.runsStarted).toBe(1);
    expect(await runState(r1.id)).toBe('success');
    expect(await runState(r2.id)).toBe('running');
    expect((await tiMap(r2.id)).get('a')).toMatchObject({ state: 'scheduled', pending_reason: null });
    expect(h.offered.some((it) => it.runId === r2.id)).toBe(true);
  });

  it('starts queued runs even behind more running runs than a step reads', BOUND, async () => {
    const spec = dag('p_behind', [task('a')], { maxActiveRuns: 100 });
    const running = [await trigger(spec), await trigger(spec), await trigger(spec)];
    await stepOk(harness()); // all three start
    const late = [await trigger(spec), await trigger(spec)];

    // Two active runs a step: the running ones fill it, yet queued runs still start.
    const h = harness({ maxRunsPerStep: 2 });
    expect((await stepOk(h)).runsStarted).toBe(2);
    expect(await Promise.all([...running, ...late].map((r) => runState(r.id)))).toEqual(Array(5).fill('running'));
  });

  it(
    "starts another DAG's run in the first step, however long one DAG's backlog of older queued runs",
    BOUND,
    async () => {
      const busy = dag('p_fair_busy', [task('a')], { maxActiveRuns: 2 });
      const backlog = [];
      // More queued runs than a full step reads, however few are running.
      for (let i = 0; i < 130; i++) backlog.push(await trigger(busy));
      const h = harness({ maxRunsPerStep: 3 });
      await stepOk(h); // two of the backlog start; the rest wait on max_active_runs
      const late = await trigger(dag('p_fair_late', [task('a')]));
      expect((await stepOk(h)).runsStarted).toBe(1);
      expect(await runState(late.id)).toBe('running');
      expect(h.offered.some((i) => i.runId === late.id)).toBe(true);
      expect(await Promise.all(backlog.map((r) => runState(r.id)))).toEqual([
        'running',
        'running',
        ...Array(128).fill('queued'),
      ]);
    },
  );

  it('starts queued runs of several DAGs in turn, not oldest first across them', BOUND, async () => {
    const a = dag('p_turn_a', [task('a')], { maxActiveRuns: 100 });
    const b = dag('p_turn_b', [task('a')], { maxActiveRuns: 100 });
    const as = [];
    for (let i = 0; i < 4; i++) as.push(await trigger(a));
    const bs = [await trigger(b), await trigger(b)];
    // A step that may start two: one of each DAG, though all of a's are older.
    const r = (await step(harness({ room: () => 2 }).ctx, 'light', { all: false, runIds: [], queued: 2 })).plan!;
    expect(r.runsStarted).toBe(2);
    expect(await Promise.all([...as, ...bs].map((x) => runState(x.id)))).toEqual([
      'running',
      'queued',
      'queued',
      'queued',
      'running',
      'queued',
    ]);
  });

  it("offers a step's tasks higher priority first: the task's own, else its DAG's", BOUND, async () => {
    const low = await trigger(dag('p_prio_low', [task('x')]));
    const high = await trigger(
      dag('p_prio_high', [task('a', { priority: 1 }), task('b', { priority: 10 }), task('c')], { priority: 5 }),
    );
    const h = harness();
    await stepOk(h);
    expect(h.offered.map((i) => `${i.runId === low.id ? 'low' : 'high'}:${i.taskId}`)).toEqual([
      'high:b',
      'high:c',
      'high:a',
      'low:x',
    ]);
    // By age alone, low's task would go first.
    expect(BigInt(high.id)).toBeGreaterThan(BigInt(low.id));
  });

  it('starts the queued run of the DAG of higher priority first, within fairness', BOUND, async () => {
    const plain = await trigger(dag('p_qprio_plain', [task('a')], { maxActiveRuns: 100 }));
    const urgent = await trigger(dag('p_qprio_urgent', [task('a')], { maxActiveRuns: 100, priority: 50 }));
    const r = (await step(harness({ room: () => 1 }).ctx, 'light', { all: false, runIds: [], queued: 1 })).plan!;
    expect(r.runsStarted).toBe(1);
    expect([await runState(plain.id), await runState(urgent.id)]).toEqual(['queued', 'running']);
  });

  it(
    'holds back a run whose start max_active_runs refuses at the write (planned from an old count), and starts it when room is made',
    BOUND,
    async () => {
      const spec = dag('p_max_write', [task('a')], { maxActiveRuns: 1 });
      const r1 = await trigger(spec);
      const h = harness({ heldBackDags: new Set(), memory: new PlannerMemory(100) });
      await stepOk(h); // r1 starts
      // r2 as created, with a count taken before r1 started (as a trigger racing the step would).
      const { dag: row } = await upsertDag(db.sql, spec, 'p_max_write.yaml');
      const r2 = await createRun(db.sql, {
        dagId: spec.dagId,
        dagVersion: row.version,
        runKey: 'second',
        runType: 'manual',
        logicalDate: new Date(),
        conf: {},
        defaultExecutor: 'subprocess',
      });
      h.ctx.memory!.keepRead({
        run: { ...r2.run, spec: r2.read!.spec, dag_paused: false, running_in_dag: 0 },
        tis: r2.read!.tis,
      });
      const r = (await step(h.ctx, 'light', { all: false, runIds: [r2.run.id], queued: 0 })).plan!;
      expect(r.runsStarted).toBe(0);
      expect(await runState(r2.run.id)).toBe('queued');
      expect(h.ctx.heldBackDags).toEqual(new Set(['p_max_write']));
      // r1 ends: the step that ends it starts r2.
      expect(await executeTask(r1.id, 'a', OK)).toBe('success');
      expect((await step(h.ctx, 'light', { all: false, runIds: [r1.id], queued: 0 })).plan).toMatchObject({
        runsFinalized: 1,
        runsStarted: 1,
      });
      expect(await runState(r2.run.id)).toBe('running');
    },
  );

  it(
    'starts a run held back by MAX_ACTIVE_RUNS in the targeted step that ends the run before it, not at the next tick',
    BOUND,
    async () => {
      const spec = dag('p_max_targeted', [task('a')], { maxActiveRuns: 1 });
      const other = dag('p_max_other', [task('a')], { maxActiveRuns: 1 });
      const r1 = await trigger(spec);
      const r2 = await trigger(spec);
      const h = harness({ heldBackDags: new Set() });
      await stepOk(h); // full: r1 starts, r2 is held back
      expect(h.ctx.heldBackDags).toEqual(new Set(['p_max_targeted']));
      const o1 = await trigger(other); // queued, never named by a nudge: left to the tick
      expect(await executeTask(r1.id, 'a', OK)).toBe('success');

      // The nudge of r1's end names r1 only.
      const r = (await step(h.ctx, 'light', { all: false, runIds: [r1.id], queued: 0 })).plan!;
      expect(r).toMatchObject({ runsFinalized: 1, runsStarted: 1, errors: 0 });
      expect(await runState(r1.id)).toBe('success');
      expect(await runState(r2.id)).toBe('running');
      expect(await runState(o1.id)).toBe('queued');
      expect((await tiMap(r2.id)).get('a')).toMatchObject({ state: 'scheduled', pending_reason: null });
      // Nothing else is held back now; a third run would be held back again by the running r2.
      expect(h.ctx.heldBackDags).toEqual(new Set());
      const r3 = await trigger(spec);
      expect(await executeTask(r2.id, 'a', OK)).toBe('success');
      const again = (await step(h.ctx, 'light', { all: false, runIds: [r2.id, r3.id], queued: 0 })).plan!;
      expect(again).toMatchObject({ runsFinalized: 1, runsStarted: 1 });
      expect(await runState(r3.id)).toBe('running');
    },
  );

  it(
    'starts the oldest queued runs when a step asks for them: as many as the pool takes, or as asked if more',
    BOUND,
    async () => {
      const spec = dag('p_queued', [task('a')], { maxActiveRuns: 100 });
      const runs = [];
      for (let i = 0; i < 5; i++) runs.push(await trigger(spec));
      const h = harness({ room: () => 2 });
      const r = (await step(h.ctx, 'light', { all: false, runIds: [], queued: 1 })).plan!;
      expect(r).toMatchObject({ runsStarted: 2, offered: 2, errors: 0 });
      expect(await Promise.all(runs.map((x) => runState(x.id)))).toEqual([
        'running',
        'running',
        'queued',
        'queued',
        'queued',
      ]);
      // Asked for more than the pool takes now (its drainers are quick): as many as asked.
      const more = (await step(harness({ room: () => 0 }).ctx, 'light', { all: false, runIds: [], queued: 2 })).plan!;
      expect(more.runsStarted).toBe(2);
      expect(await Promise.all(runs.map((x) => runState(x.id)))).toEqual([
        'running',
        'running',
        'running',
        'running',
        'queued',
      ]);
    },
  );

  it('leaves a TI scheduled with WAITING_FOR_DISPATCH when the pool is full, and offers it again', BOUND, async () => {
    const run = await trigger(dag('p_full', [task('a')]));
    const h = harness();
    h.answer.next = 'full';
    const r = await stepOk(h);
    expect(r.offered).toBe(0);
    expect(h.offered).toHaveLength(1);
    expect((await tiMap(run.id)).get('a')).toMatchObject({ state: 'scheduled', pending_reason: WAIT_REASON });

    // Already waiting in the pool: the reason is left as it is.
    h.answer.next = 'duplicate';
    await stepOk(h);
    expect((await tiMap(run.id)).get('a')!.pending_reason).toBe(WAIT_REASON);

    h.answer.next = 'accepted';
    const r2 = await stepOk(h);
    expect(r2.offered).toBe(1);
    expect(h.offered).toHaveLength(3);
    expect(h.offered.every((i) => i.taskId === 'a')).toBe(true);
    expect((await tiMap(run.id)).get('a')).toMatchObject({ state: 'scheduled', pending_reason: null });
  });

  it(
    'sweeps the running runs a stretch a full step, so each is looked at within a known number of steps however many there are',
    BOUND,
    async () => {
      const spec = dag('p_sweep', [task('a')], { maxActiveRuns: 100 });
      const runs = [];
      for (let i = 0; i < 7; i++) runs.push(await trigger(spec));
      await stepOk(harness()); // all start
      // Six tasks run on (nothing to decide); the last one ends with no nudge: nothing but a read
      // of its run can end the run, and the six older runs fill any read of the oldest.
      const live = runs.slice(0, 6).map((r) => r.id);
      await db.sql`update task_instances set state = 'running', try_number = 1, attempt_token = gen_random_uuid(), queued_at = now(),
                   started_at = now(), heartbeat_at = now() where run_id = any(${live}::bigint[])`;
      expect(await executeTask(runs[6]!.id, 'a', OK)).toBe('success');
      const h = harness({ sweepRunsPerStep: 3, sweep: { cursor: '0' } });
      expect((await stepOk(h)).runsFinalized).toBe(0);
      expect(h.ctx.sweep).toMatchObject({ cursor: runs[2]!.id });
      expect((await stepOk(h)).runsFinalized).toBe(0);
      expect((await stepOk(h)).runsFinalized).toBe(1);
      expect(await runState(runs[6]!.id)).toBe('success');
      // The last stretch was short: the sweep starts over.
      expect(h.ctx.sweep).toMatchObject({ cursor: '0' });
    },
  );

  it('reads a run with a retry due in every full step, wherever the sweep is', BOUND, async () => {
    const spec = dag('p_sweep_due', [task('a', { retries: 1, retryDelayMs: 0 })], { maxActiveRuns: 100 });
    const runs = [];
    for (let i = 0; i < 4; i++) runs.push(await trigger(spec));
    await stepOk(harness());
    for (const r of runs.slice(0, 3)) expect(await executeTask(r.id, 'a', OK)).toBe('success');
    // The last run's try fails: its retry is due at once, and no nudge says so.
    expect(await executeTask(runs[3]!.id, 'a', FAIL)).toBe('up_for_retry');
    const h = harness({ sweepRunsPerStep: 1, sweep: { cursor: '0' } });
    const r = await stepOk(h);
    // The sweep read the first run only; the run with its retry due was read as well.
    expect(r.runsFinalized).toBe(1);
    expect((await tiMap(runs[3]!.id)).get('a')).toMatchObject({ state: 'scheduled', try_number: 1 });
    expect(h.offered.map((i) => i.runId)).toEqual([runs[3]!.id]);
    expect(await runState(runs[1]!.id)).toBe('running');
  });

  it(
    'offers again the tasks waiting to be offered beyond the sweep when a nudge asks for everything, not at every tick',
    BOUND,
    async () => {
      const runs = [];
      for (let i = 0; i < 4; i++) runs.push(await trigger(dag('p_asked', [task('a')], { maxActiveRuns: 100 })));
      const h = harness({ sweepRunsPerStep: 1, sweep: { cursor: '0' } });
      h.answer.next = 'full';
      await step(h.ctx, 'light', { all: true, asked: true }); // all start; every offer refused
      h.offered.length = 0;
      h.answer.next = 'accepted';
      // The tick: its sweep's stretch only.
      await step(h.ctx, 'full', { all: true });
      expect(h.offered.map((i) => i.runId)).toEqual([runs[0]!.id]);
      h.offered.length = 0;
      // An agent connected (say): every task waiting is offered again.
      await step(h.ctx, 'light', { all: true, asked: true });
      expect(h.offered.map((i) => i.runId).sort()).toEqual(runs.map((r) => r.id).sort());
    },
  );

  it('plans at once the runs of the attempts the reapers ended, not when the sweep comes round', BOUND, async () => {
    const spec = dag('p_reaped', [task('a'), task('b', { dependsOn: ['a'] })], { maxActiveRuns: 100 });
    const run = await trigger(spec);
    await stepOk(harness());
    const a = (await tiMap(run.id)).get('a')!;
    await db.sql`update task_instances set state = 'running', try_number = 1, attempt_token = gen_random_uuid(), queued_at = now() - interval '1 hour',
                   started_at = now() - interval '1 hour', heartbeat_at = now() - interval '1 hour' where id = ${a.id}`;
    const nudged: string[][] = [];
    const h = harness({ heartbeatThresholdMs: 5_000, nudge: (ids) => nudged.push(ids) });
    const r = await step(h.ctx);
    expect(r.reapHeartbeats).toMatchObject({ failed: 1, runIds: [run.id] });
    expect(nudged).toEqual([[run.id]]);
  });

  it(
    'lists the runs a full pool refused, oldest refusal first, so the drain offers again only as many as there is room for',
    BOUND,
    async () => {
      const runs = [];
      for (const id of ['p_wait_1', 'p_wait_2', 'p_wait_3']) runs.push(await trigger(dag(id, [task('a')])));
      const waiters = new RoomWaiters();
      const h = harness({ roomWaiters: waiters });
      h.answer.next = 'full';
      await stepOk(h);
      expect(waiters.size).toBe(3);
      // The pool has room for one: the run refused first, and only it, is read and offered again.
      const first = waiters.take(1);
      expect(first).toEqual([runs[0]!.id]);
      h.answer.next = 'accepted';
      h.offered.length = 0;
      const r = (await step(h.ctx, 'light', { all: false, runIds: first, queued: 0 })).plan!;
      expect(r.offered).toBe(1);
      expect(h.offered.map((i) => i.runId)).toEqual([runs[0]!.id]);
      expect(waiters.take(10)).toEqual([runs[1]!.id, runs[2]!.id]);
      // Refused again when read again: listed again, behind the others.
      h.answer.next = 'full';
      await step(h.ctx, 'light', { all: false, runIds: [runs[1]!.id], queued: 0 });
      expect(waiters.take(10)).toEqual([runs[1]!.id]);
    },
  );

  it('keeps a TI whose executor is not available waiting with NO_EXECUTOR:<kind>', BOUND, async () => {
    const run = await trigger(dag('p_noexec', [task('k', { executor: 'kubernetes' }), task('s')]));
    const h = harness();
    for (let i = 0; i < 2; i++) {
      const r = await stepOk(h);
      expect(r.offered).toBe(1);
      const tis = await tiMap(run.id);
      expect(tis.get('k')).toMatchObject({
        state: 'scheduled',
        executor: 'kubernetes',
        pending_reason: 'NO_EXECUTOR:kubernetes',
      });
      expect(tis.get('s')).toMatchObject({ state: 'scheduled', executor: 'subprocess', pending_reason: null });
    }
    expect(h.offered.map((i) => i.taskId)).toEqual(['s', 's']);
  });

  it('marks a poison run and still advances the other runs of the same step', BOUND, async () => {
    const ghostSpec = dag('p_ghost', [task('a')]);
    const ghost = await trigger(ghostSpec);
    // Its run's version is the DAG's only one: corrupted, it corrupts this run alone.
    await db.sql`update dag_versions set spec = ${db.sql.json({ ...ghostSpec, tasks: [task('a'), task('ghost', { dependsOn: ['a'] })] } as never)} where dag_id = 'p_ghost'`;
    const cycleSpec = dag('p_cycle', [task('x'), task('y')]);
    const cycle = await trigger(cycleSpec);
    await db.sql`update dag_versions set spec = ${db.sql.json({ ...cycleSpec, tasks: [task('x', { dependsOn: ['y'] }), task('y', { dependsOn: ['x'] })] } as never)} where dag_id = 'p_cycle'`;
    const good = await trigger(dag('p_good', [task('g')]));

    const h = harness();
    const r = await stepOk(h);
    expect(r.errors).toBe(2);
    expect(r.runsAdvanced).toBe(1);
    expect(h.errors.map((e) => [e.phase, e.ids?.runId])).toEqual([
      ['plan.advance', ghost.id],
      ['plan.advance', cycle.id],
    ]);
    expect((await getRun(db.sql, ghost.id))!.poison_error).toMatch(/ghost/);
    expect((await getRun(db.sql, cycle.id))!.poison_error).toMatch(/cycle/);
    const poisoned = await db.sql<
      { run_id: string }[]
    >`select run_id from events where kind = 'run.poisoned' order by seq`;
    expect(poisoned.map((e) => e.run_id)).toEqual([ghost.id, cycle.id]);

    expect(await runState(good.id)).toBe('running');
    expect((await tiMap(good.id)).get('g')!.state).toBe('scheduled');
    expect(h.offered.map((i) => i.runId)).toEqual([good.id]);

    // A poisoned run is skipped from now on, not retried (and not re-reported) every tick.
    h.errors.length = 0;
    await executeTask(good.id, 'g', OK);
    const r2 = await stepOk(h);
    expect(r2.errors).toBe(0);
    expect(h.errors).toEqual([]);
    expect(await runState(good.id)).toBe('success');
    expect(await db.sql`select 1 from events where kind = 'run.poisoned'`).toHaveLength(2);
  });
});

describe('plan: cron runs', () => {
  const NOW = new Date('2026-01-01T10:07:30.000Z');
  const START = new Date(NOW.getTime() - 5 * 60_000).toISOString(); // 10:02:30
  const cronSpec = (dagId: string, catchup: boolean) =>
    dag(dagId, [task('a')], { schedule: '* * * * *', catchup, startDate: START, maxActiveRuns: 1 });

  async function scheduledKeys(dagId: string): Promise<string[]> {
    const rows = await db.sql<
      { run_key: string; run_type: string }[]
    >`select run_key, run_type from dag_runs where dag_id = ${dagId} order by logical_date`;
    for (const r of rows) expect(r.run_type).toBe('scheduled');
    return rows.map((r) => r.run_key);
  }

  it('with catchup, creates one run per missed fire time and moves next_run_at forward', BOUND, async () => {
    await upsertDag(db.sql, cronSpec('cron_catchup', true), 'cron.yaml', NOW);
    expect((await getDag(db.sql, 'cron_catchup'))!.next_run_at).toEqual(new Date('2026-01-01T10:03:00Z'));
    const h = harness();
    h.clock.now = NOW;
    const r = await stepOk(h);
    expect(r.runsCreated).toBe(5);
    expect(await scheduledKeys('cron_catchup')).toEqual(
      ['10:03', '10:04', '10:05', '10:06', '10:07'].map((t) => `scheduled__2026-01-01T${t}:00.000Z`),
    );
    const runs = await db.sql<
      { logical_date: Date; state: string }[]
    >`select logical_date, state from dag_runs where dag_id = 'cron_catchup' order by logical_date`;
    expect(runs[0]!.logical_date).toEqual(new Date('2026-01-01T10:03:00Z'));
    // max_active_runs 1: the oldest starts, the rest wait.
    expect(runs.map((x) => x.state)).toEqual(['running', 'queued', 'queued', 'queued', 'queued']);
    expect((await getDag(db.sql, 'cron_catchup'))!.next_run_at).toEqual(new Date('2026-01-01T10:08:00Z'));

    // Same instant again: nothing new. One minute later: exactly one more.
    expect((await stepOk(h)).runsCreated).toBe(0);
    h.clock.now = new Date(NOW.getTime() + 60_000);
    expect((await stepOk(h)).runsCreated).toBe(1);
    expect(await scheduledKeys('cron_catchup')).toHaveLength(6);
    expect((await getDag(db.sql, 'cron_catchup'))!.next_run_at).toEqual(new Date('2026-01-01T10:09:00Z'));
  });

  it('without catchup, creates only the latest run', BOUND, async () => {
    await upsertDag(db.sql, cronSpec('cron_latest', false), 'cron.yaml', NOW);
    const h = harness();
    h.clock.now = NOW;
    expect((await stepOk(h)).runsCreated).toBe(1);
    expect(await scheduledKeys('cron_latest')).toEqual(['scheduled__2026-01-01T10:07:00.000Z']);
    expect((await getDag(db.sql, 'cron_latest'))!.next_run_at).toEqual(new Date('2026-01-01T10:08:00Z'));

    // A long pause with catchup off still yields a single run: the latest fire time.
    h.clock.now = new Date(NOW.getTime() + 10 * 60_000);
    expect((await stepOk(h)).runsCreated).toBe(1);
    expect(await scheduledKeys('cron_latest')).toEqual([
      'scheduled__2026-01-01T10:07:00.000Z',
      'scheduled__2026-01-01T10:17:00.000Z',
    ]);
  });

  it('creates no duplicates when two leaders run the cron part at once', BOUND, async () => {
    await upsertDag(db.sql, cronSpec('cron_twice', true), 'cron.yaml', NOW);
    const other = createSql(db.url, { max: 2 });
    try {
      const a = harness();
      const b = harness({ sql: other });
      a.clock.now = NOW;
      b.clock.now = NOW;
      const [ra, rb] = await Promise.all([createScheduledRuns(a.ctx), createScheduledRuns(b.ctx)]);
      expect(ra.created + rb.created).toBe(5);
      expect([ra.created, rb.created].sort()).toEqual([0, 5]);
      expect(await scheduledKeys('cron_twice')).toHaveLength(5);
      // And once more each, one after the other.
      expect((await createScheduledRuns(b.ctx)).created).toBe(0);
      expect((await createScheduledRuns(a.ctx)).created).toBe(0);
      expect(await scheduledKeys('cron_twice')).toHaveLength(5);
      expect([...a.errors, ...b.errors]).toEqual([]);
      const [count] = await db.sql<{ n: number }[]>`
        select count(*)::int as n from task_instances ti join dag_runs r on r.id = ti.run_id where r.dag_id = 'cron_twice'`;
      expect(count!.n).toBe(5);
    } finally {
      await other.end({ timeout: 5 });
    }
  });

  it('creates no runs for a paused DAG', BOUND, async () => {
    await upsertDag(db.sql, cronSpec('cron_paused', true), 'cron.yaml', NOW);
    await db.sql`update dags set paused = true where dag_id = 'cron_paused'`;
    const h = harness();
    h.clock.now = NOW;
    expect((await stepOk(h)).runsCreated).toBe(0);
    expect(await scheduledKeys('cron_paused')).toEqual([]);
  });
});

describe('paused DAGs', () => {
  it(
    'keep queued runs queued, start nothing new in running runs, let attempts finish, and resume on unpause',
    BOUND,
    async () => {
      const spec = dag('p_pause', [task('a'), task('b', { dependsOn: ['a'] }), task('c')], { maxActiveRuns: 5 });
      const r1 = await trigger(spec);
      const h = harness();
      await stepOk(h);
      expect(await states(r1.id)).toEqual({ a: 'scheduled', b: 'none', c: 'scheduled' });
      // c starts before the pause and must be allowed to finish.
      const c = (await tiMap(r1.id)).get('c')!;
      const claim = (await claimAttempt(db.sql, c.id, 'subprocess'))!;
      expect(
        await startAttempt(
          db.sql,
          { tiId: c.id, tryNumber: 1, attemptToken: claim.attemptToken },
          { pid: 1, agentId: null },
        ),
      ).toBe(true);

      await db.sql`update dags set paused = true where dag_id = 'p_pause'`;
      const r2 = await trigger(spec);
      h.offered.length = 0;
      await stepOk(h);
      // Nothing offered: the scheduled a waits, the queued run stays queued, both say why.
      expect(h.offered).toEqual([]);
      expect(await runState(r2.id)).toBe('queued');
      for (const ti of await listTis(db.sql, r2.id)) expect(ti.pending_reason).toBe('DAG_PAUSED');
      expect((await tiMap(r1.id)).get('a')).toMatchObject({ state: 'scheduled', pending_reason: 'DAG_PAUSED' });
      // The running attempt still reports its end.
      expect(await finishAttempt(db.sql, { tiId: c.id, tryNumber: 1, attemptToken: claim.attemptToken }, OK)).toBe(
        'success',
      );
      await stepOk(h);
      expect(h.offered).toEqual([]);
      expect(await runState(r1.id)).toBe('running');

      await db.sql`update dags set paused = false where dag_id = 'p_pause'`;
      await stepOk(h);
      expect(await runState(r2.id)).toBe('running');
      expect(h.offered.map((i) => `${i.runId}:${i.taskId}`).sort()).toEqual(
        [`${r1.id}:a`, `${r2.id}:a`, `${r2.id}:c`].sort(),
      );
      expect((await tiMap(r1.id)).get('a')!.pending_reason).toBeNull();
    },
  );

  it("keep no other DAG's queued run from starting, however many of their queued runs are older", BOUND, async () => {
    // More queued runs of a paused DAG than a step reads, all older than the run that can start.
    const paused = dag('p_backlog', [task('a')], { maxActiveRuns: 100 });
    const backlog = [];
    for (let i = 0; i < 3; i++) backlog.push(await trigger(paused));
    await db.sql`update dags set paused = true where dag_id = 'p_backlog'`;
    const other = await trigger(dag('p_other', [task('a')]));
    const h = harness({ maxRunsPerStep: 2 });
    await stepOk(h);
    expect(await runState(other.id)).toBe('running');
    expect(h.offered.map((i) => i.runId)).toEqual([other.id]);
    // The backlog is read once there is room, and says why it waits.
    await stepOk(h);
    for (const r of backlog) expect(await runState(r.id)).toBe('queued');
    expect((await listTis(db.sql, backlog[0]!.id))[0]!.pending_reason).toBe('DAG_PAUSED');
  });
});
