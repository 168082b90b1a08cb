/**
 * The planner through whole steps on a real database: claims with the move, a run started, a DAG
 * advanced to success, a failure propagated, a retry's backoff.
 */
import pino from 'pino';
import { describe, expect, it, vi } from 'vitest';
import { claimAttempt } from '../../src/db/attempts/claim-attempt.js';
import { finishAttempt } from '../../src/db/attempts/finish-attempt.js';
import { startAttempt } from '../../src/db/attempts/start-attempt.js';
import { getRun } from '../../src/db/runs.js';
import { listTis } from '../../src/db/tis.js';
import { createDispatchPool } from '../../src/dispatch/pool.js';
import type { WorkItem } from '../../src/core/work-item.js';
import { databaseForFile } from '../helpers/test-database.js';
import { dag } from '../helpers/spec-builders.js';
import { BOUND, FAIL, OK, planningFixtures, stepOk, task } from '../helpers/planning-fixtures.js';

const logger = pino({ level: 'silent' });

// The planner looks at every active run of the database: start each test from an empty one.
const db = databaseForFile({ emptyEach: true });
const { harness, trigger, tiMap, states, runState, execute, executeTask } = planningFixtures(db);

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
});
