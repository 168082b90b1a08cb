/**
 * The planner's queues: MAX_ACTIVE_RUNS, queued runs started in turn across DAGs and by priority, a
 * full pool, the sweep and nudges, a missing executor, a poison run.
 */
import { describe, expect, it } from 'vitest';
import { upsertDag } from '../../src/db/dags.js';
import { createRun, getRun } from '../../src/db/runs.js';
import { listTis } from '../../src/db/tis.js';
import { PlannerMemory } from '../../src/scheduler/planner-memory.js';
import { RoomWaiters } from '../../src/scheduler/room-waiters.js';
import { step } from '../../src/scheduler/step.js';
import { databaseForFile } from '../helpers/test-database.js';
import { dag } from '../helpers/spec-builders.js';
import { TEST_WAIT_REASON as WAIT_REASON } from '../helpers/test-dispatcher.js';
import { BOUND, FAIL, OK, planningFixtures, stepOk, task } from '../helpers/planning-fixtures.js';

// The planner looks at every active run of the database: start each test from an empty one.
const db = databaseForFile({ emptyEach: true });
const { harness, trigger, tiMap, runState, executeTask } = planningFixtures(db);

describe('plan', () => {
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
