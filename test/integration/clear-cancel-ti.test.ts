import { describe, expect, it } from 'vitest';
import type { AttemptResult } from '../../src/core/attempt.js';
import { advanceRun, type TiStateView } from '../../src/core/advance-run.js';
import type { DagSpec } from '../../src/core/dag-spec.js';
import { TI_STATES, isTerminalTi, type RunStateName } from '../../src/core/states.js';
import { claimAttempt, type Claim } from '../../src/db/attempts/claim-attempt.js';
import { finishAttempt } from '../../src/db/attempts/finish-attempt.js';
import { startAttempt } from '../../src/db/attempts/start-attempt.js';
import { cancelTaskInstance } from '../../src/db/cancel-task-instance.js';
import { clearTaskInstance } from '../../src/db/clear-task-instance.js';
import { finalizeRuns } from '../../src/db/plan/finalize-runs.js';
import { getRun, transitionRun, type RunRow } from '../../src/db/runs.js';
import { getTi, listTis, transitionTis, type TiRow } from '../../src/db/tis.js';
import { databaseForFile } from '../helpers/test-database.js';
import { dag, task } from '../helpers/spec-builders.js';
import { attemptFixtures } from '../helpers/attempt-fixtures.js';

/**
 * Clearing (retry by hand) and cancelling one task instance, on real Postgres: the guarded moves,
 * the try/retry budget, the run re-open, the events, and what nothing may change when refused.
 */

const db = databaseForFile({ emptyEach: true });

/** a → b → c → e, d independent; b has 2 retries in the spec. */
const chain = (dagId: string) =>
  dag(dagId, [
    task('a'),
    task('b', { dependsOn: ['a'], retries: 2 }),
    task('c', { dependsOn: ['b'], retries: 1 }),
    task('d'),
    task('e', { dependsOn: ['c'] }),
  ]);

const fixtures = attemptFixtures(() => db.sql, 'subprocess');
const newRun = async (spec: DagSpec): Promise<RunRow> =>
  (await fixtures.queuedRun(spec, { logicalDate: new Date() })).run;

async function tisOf(runId: string): Promise<Map<string, TiRow>> {
  return new Map((await listTis(db.sql, runId)).map((t) => [t.task_id, t]));
}

const ok: AttemptResult = { exitCode: 0, signal: null, error: null, outcome: 'success' };
const fail: AttemptResult = { exitCode: 1, signal: null, error: 'exit code 1', outcome: 'failed' };

/** Schedules, claims and starts the next attempt of a task (the run must be running). */
async function startNext(runId: string, taskId: string): Promise<{ ti: TiRow; claim: Claim }> {
  const ti = (await tisOf(runId)).get(taskId)!;
  expect(await transitionTis(db.sql, runId, [taskId], 'scheduled'), `${taskId} scheduled`).toEqual([ti.id]);
  const claim = (await claimAttempt(db.sql, ti.id, 'subprocess'))!;
  expect(claim, `${taskId} claimed`).not.toBeNull();
  expect(await startAttempt(db.sql, { tiId: ti.id, ...claim }, { pid: 4242, agentId: null })).toBe(true);
  return { ti, claim };
}

async function runAttempt(runId: string, taskId: string, result: AttemptResult): Promise<Claim> {
  const { ti, claim } = await startNext(runId, taskId);
  await finishAttempt(db.sql, { tiId: ti.id, ...claim }, result);
  return claim;
}

/** What the planner would do next, applied: the trigger rules, then finalize when all ended. */
async function plan(runId: string): Promise<void> {
  const run = (await getRun(db.sql, runId))!;
  const [version] = await db.sql<
    { spec: DagSpec }[]
  >`select spec from dag_versions where dag_id = ${run.dag_id} and version = ${run.dag_version}`;
  const spec = version!.spec;
  const views = new Map<string, TiStateView>(
    [...(await tisOf(runId))].map(([id, t]) => [
      id,
      { state: t.state, nextTryAt: null, pendingReason: t.pending_reason },
    ]),
  );
  const d = advanceRun(spec.tasks, views, new Date());
  await transitionTis(db.sql, runId, d.upstreamFailed, 'upstream_failed', { endedNow: true });
  await transitionTis(db.sql, runId, d.skipped, 'skipped', { endedNow: true });
  if (d.outcome) await finalizeRuns(db.sql, [{ runId, epoch: run.plan_epoch, outcome: d.outcome }]);
}

/**
 * A run of `chain` that failed: a success; b failed on its last try (3/3); c, e upstream_failed
 * (never ran); d success.
 */
async function failedChainRun(dagId: string): Promise<RunRow> {
  const run = await newRun(chain(dagId));
  expect(await transitionRun(db.sql, run.id, 'running')).toBe(true);
  await runAttempt(run.id, 'a', ok);
  await runAttempt(run.id, 'd', ok);
  for (let i = 0; i < 3; i++) await runAttempt(run.id, 'b', fail);
  await plan(run.id);
  const after = (await getRun(db.sql, run.id))!;
  expect(after.state).toBe('failed');
  const tis = await tisOf(run.id);
  expect([...tis.values()].map((t) => [t.task_id, t.state, t.try_number])).toEqual([
    ['a', 'success', 1],
    ['b', 'failed', 3],
    ['c', 'upstream_failed', 0],
    ['d', 'success', 1],
    ['e', 'upstream_failed', 0],
  ]);
  return after;
}

type Ev = { ti_id: string | null; kind: string; payload: Record<string, unknown> };
async function eventsOf(runId: string): Promise<Ev[]> {
  return db.sql<Ev[]>`select ti_id, kind, payload from events where run_id = ${runId} order by seq`;
}
async function eventCount(): Promise<number> {
  const [r] = await db.sql<{ n: number }[]>`select count(*)::int as n from events`;
  return r!.n;
}
async function snapshot(runId: string) {
  return { run: await getRun(db.sql, runId), tis: await listTis(db.sql, runId), events: await eventCount() };
}

describe('clearTaskInstance', () => {
  it('clears a failed task: none, same try, fresh retries, outcome erased, run re-opened, one transaction of events', async () => {
    const run = await failedChainRun('cl1');
    const before = await tisOf(run.id);
    await db.sql`delete from events`;

    const out = await clearTaskInstance(db.sql, { runId: run.id, taskId: 'b', downstream: false });
    if (out.kind !== 'cleared') throw new Error(out.kind);
    expect(out.reopenedFrom).toBe('failed');
    expect(out.cleared.map((t) => t.task_id)).toEqual(['b']);
    const b = out.cleared[0]!;
    // try 3 of 3 kept; retries: 2 in the spec → tries 4, 5 and 6 are allowed.
    expect(b).toMatchObject({
      state: 'none',
      try_number: 3,
      max_tries: 6,
      error: null,
      exit_code: null,
      ended_at: null,
      next_try_at: null,
      started_at: null,
      queued_at: null,
      heartbeat_at: null,
      pid: null,
      attempt_token: null,
      pending_reason: null,
    });
    expect(await getTi(db.sql, b.id)).toEqual(b);

    const r = (await getRun(db.sql, run.id))!;
    expect(out.run).toEqual(r);
    expect(r.state).toBe('running');
    expect(r.ended_at).toBeNull();
    expect(r.settled_at).toBeNull();
    // Its first start is kept (its duration is the wall time to its last end); the re-open is
    // when the orphan-run reaper measures from.
    expect(r.started_at).toEqual(run.started_at);
    expect(r.reopened_at!.getTime()).toBeGreaterThanOrEqual(run.ended_at!.getTime());

    // Without downstream, the others are untouched.
    const after = await tisOf(run.id);
    for (const id of ['a', 'c', 'd', 'e']) expect(after.get(id), id).toEqual(before.get(id));

    expect(await eventsOf(run.id)).toEqual([
      {
        ti_id: b.id,
        kind: 'ti.state',
        payload: { task_id: 'b', to: 'none', from: 'failed', try: 3, max_tries: 6, reason: 'cleared' },
      },
      { ti_id: null, kind: 'run.state', payload: { to: 'running', from: 'failed', reason: 'cleared', task_id: 'b' } },
    ]);
    // The events were written in the same transaction as the moves.
    const xids = await db.sql<{ xmin: string }[]>`select xmin::text from events where run_id = ${run.id}
      union select xmin::text from task_instances where id = ${b.id} union select xmin::text from dag_runs where id = ${run.id}`;
    expect(xids).toHaveLength(1);
  });

  it('with downstream clears every ended task after it, transitively, and only those', async () => {
    const run = await failedChainRun('cl2');
    const before = await tisOf(run.id);
    const out = await clearTaskInstance(db.sql, { runId: run.id, taskId: 'b', downstream: true });
    if (out.kind !== 'cleared') throw new Error(out.kind);
    expect(out.cleared.map((t) => [t.task_id, t.state, t.try_number, t.max_tries])).toEqual([
      ['b', 'none', 3, 6],
      ['c', 'none', 0, 2], // never ran: its next attempt is try 1, with its 1 retry
      ['e', 'none', 0, 1],
    ]);
    const after = await tisOf(run.id);
    expect(after.get('a')).toEqual(before.get('a'));
    expect(after.get('d')).toEqual(before.get('d'));
    const ev = (await eventsOf(run.id)).filter((e) => e.payload.reason === 'cleared');
    expect(ev.map((e) => [e.kind, e.payload.task_id ?? null, e.payload.from])).toEqual([
      ['ti.state', 'b', 'failed'],
      ['ti.state', 'c', 'upstream_failed'],
      ['ti.state', 'e', 'upstream_failed'],
      ['run.state', 'b', 'failed'],
    ]);

    // The run goes on as if new from b: try 4 succeeds, then c and e run their first try.
    expect((await runAttempt(run.id, 'b', ok)).tryNumber).toBe(4);
    const c = await runAttempt(run.id, 'c', ok);
    expect(c).toMatchObject({ tryNumber: 1, maxTries: 2 });
    expect(c.dispatchKey).toBe(`cl2-${run.id}-c-1`);
    await runAttempt(run.id, 'e', ok);
    await plan(run.id);
    expect((await getRun(db.sql, run.id))!.state).toBe('success');
    expect([...(await tisOf(run.id)).values()].map((t) => [t.task_id, t.state, t.try_number])).toEqual([
      ['a', 'success', 1],
      ['b', 'success', 4],
      ['c', 'success', 1],
      ['d', 'success', 1],
      ['e', 'success', 1],
    ]);
  });

  it('leaves a downstream task that has not ended alone, and clears in a running run without re-opening it', async () => {
    const spec = dag('cl3', [
      task('a'),
      task('b', { dependsOn: ['a'], triggerRule: 'all_done' }),
      task('c', { dependsOn: ['b'] }),
    ]);
    const run = await newRun(spec);
    await transitionRun(db.sql, run.id, 'running');
    await runAttempt(run.id, 'a', fail);
    await startNext(run.id, 'b'); // running under all_done
    await db.sql`update dag_runs set settled_at = now() where id = ${run.id}`;
    const out = await clearTaskInstance(db.sql, { runId: run.id, taskId: 'a', downstream: true });
    if (out.kind !== 'cleared') throw new Error(out.kind);
    expect(out.reopenedFrom).toBeNull();
    expect(out.cleared.map((t) => t.task_id)).toEqual(['a']);
    expect(out.run).toMatchObject({ state: 'running', settled_at: null });
    const tis = await tisOf(run.id);
    expect(tis.get('b')).toMatchObject({ state: 'running', try_number: 1 });
    expect(tis.get('c')).toMatchObject({ state: 'none' });
    expect((await eventsOf(run.id)).filter((e) => e.kind === 'run.state').map((e) => e.payload.to)).toEqual([
      'queued',
      'running',
    ]);
  });

  it('re-opens a run that succeeded or was cancelled, and clears every ended state', async () => {
    for (const [i, runState] of (['success', 'cancelled'] as RunStateName[]).entries()) {
      const ended = TI_STATES.filter(isTerminalTi);
      const run = await newRun(
        dag(
          `cl4_${i}`,
          ended.map((s) => task(`t_${s}`)),
        ),
      );
      for (const s of ended)
        await db.sql`update task_instances set state = ${s}, ended_at = now() where run_id = ${run.id} and task_id = ${`t_${s}`}`;
      await db.sql`update dag_runs set state = ${runState}, ended_at = now() where id = ${run.id}`;
      for (const s of ended) {
        const out = await clearTaskInstance(db.sql, { runId: run.id, taskId: `t_${s}`, downstream: false });
        if (out.kind !== 'cleared') throw new Error(`${s}: ${out.kind}`);
        expect(out.cleared.map((t) => [t.task_id, t.state])).toEqual([[`t_${s}`, 'none']]);
        expect(out.run.state).toBe('running');
      }
      const reopen = (await eventsOf(run.id)).filter((e) => e.kind === 'run.state');
      expect(reopen.map((e) => e.payload)).toEqual([
        { to: 'queued', run_key: expect.any(String), run_type: 'manual' },
        { to: 'running', from: runState, reason: 'cleared', task_id: `t_${ended[0]}` },
      ]);
    }
  });

  it('refuses a task that has not ended, naming its state, and writes nothing', async () => {
    const spec = dag(
      'cl5',
      TI_STATES.map((s) => task(`t_${s}`)),
    );
    const run = await newRun(spec);
    await db.sql`update dag_runs set state = 'running' where id = ${run.id}`;
    for (const s of TI_STATES)
      await db.sql`update task_instances set state = ${s} where run_id = ${run.id} and task_id = ${`t_${s}`}`;
    for (const s of TI_STATES.filter((x) => !isTerminalTi(x))) {
      const before = await snapshot(run.id);
      const out = await clearTaskInstance(db.sql, { runId: run.id, taskId: `t_${s}`, downstream: true });
      expect(out.kind, s).toBe('not_ended');
      if (out.kind === 'not_ended') expect(out.ti.state).toBe(s);
      expect(await snapshot(run.id), s).toEqual(before);
    }
  });

  it('answers run_not_found and task_not_found', async () => {
    const run = await newRun(dag('cl6', [task('a')]));
    expect(await clearTaskInstance(db.sql, { runId: '987654321', taskId: 'a', downstream: false })).toEqual({
      kind: 'run_not_found',
    });
    expect((await clearTaskInstance(db.sql, { runId: run.id, taskId: 'zz', downstream: false })).kind).toBe(
      'task_not_found',
    );
  });

  it('two concurrent clears of one task: one clears, the other finds it not ended', async () => {
    const run = await failedChainRun('cl7');
    await db.sql`delete from events`;
    const outs = await Promise.all(
      [1, 2].map(() => clearTaskInstance(db.sql, { runId: run.id, taskId: 'b', downstream: true })),
    );
    expect(outs.map((o) => o.kind).sort()).toEqual(['cleared', 'not_ended']);
    const ev = await eventsOf(run.id);
    expect(ev.filter((e) => e.kind === 'run.state')).toHaveLength(1);
    expect(ev.filter((e) => e.kind === 'ti.state')).toHaveLength(3);
  });

  it('fences off a late report of the cleared attempt', async () => {
    const run = await newRun(dag('cl8', [task('a')]));
    await transitionRun(db.sql, run.id, 'running');
    const { ti, claim } = await startNext(run.id, 'a');
    expect((await cancelTaskInstance(db.sql, run.id, 'a')).kind).toBe('cancelled');
    expect((await clearTaskInstance(db.sql, { runId: run.id, taskId: 'a', downstream: false })).kind).toBe('cleared');
    // The cancelled process ends only now: its report must not end the cleared TI.
    const cancelled: AttemptResult = { exitCode: null, signal: 'SIGTERM', error: 'cancelled', outcome: 'cancelled' };
    expect(await finishAttempt(db.sql, { tiId: ti.id, ...claim }, cancelled)).toBe('rejected');
    expect(await finishAttempt(db.sql, { tiId: ti.id, ...claim }, ok)).toBe('rejected');
    expect((await getTi(db.sql, ti.id))!).toMatchObject({ state: 'none', try_number: 1, max_tries: 2 });
    const next = await runAttempt(run.id, 'a', ok);
    expect(next).toMatchObject({ tryNumber: 2, maxTries: 2 });
  });

  it('a finalize that raced with a clear does not end the run over the cleared task', async () => {
    const spec = dag('cl9', [task('a')]);
    const run = await newRun(spec);
    await transitionRun(db.sql, run.id, 'running');
    await runAttempt(run.id, 'a', fail);
    // The planner read the run (every TI ended) just before the clear.
    const read = (await getRun(db.sql, run.id))!;
    // The clear's transaction (its writes, as clearTaskInstance makes them), held open; the
    // planner's finalize waits on the run row meanwhile.
    const reserved = await db.sql.reserve();
    try {
      await reserved`begin`;
      await reserved`update dag_runs set settled_at = null, plan_epoch = plan_epoch + 1 where id = ${run.id}`;
      await reserved`update task_instances set state = 'none' where run_id = ${run.id}`;
      const finalizing = finalizeRuns(db.sql, [{ runId: run.id, epoch: read.plan_epoch, outcome: 'failed' }]);
      await waitForLockWait();
      await reserved`commit`;
      expect([...(await finalizing)]).toEqual([]);
    } finally {
      reserved.release();
    }
    expect((await getRun(db.sql, run.id))!.state).toBe('running');
  });
});

/** Until some session of the test database waits on a lock. */
async function waitForLockWait(): Promise<void> {
  const deadline = Date.now() + 5000;
  for (;;) {
    const [w] =
      await db.sql`select 1 from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock'`;
    if (w) return;
    if (Date.now() > deadline) throw new Error('no session waits on a lock');
    await new Promise((r) => setTimeout(r, 10));
  }
}

describe('cancelTaskInstance', () => {
  it('cancels every state that has not ended, with an event; queued/running may hold a process', async () => {
    const open = TI_STATES.filter((s) => !isTerminalTi(s));
    const run = await newRun(
      dag(
        'cn1',
        open.map((s) => task(`t_${s}`)),
      ),
    );
    await db.sql`update dag_runs set state = 'running' where id = ${run.id}`;
    for (const s of open)
      await db.sql`update task_instances set state = ${s}, next_try_at = now(), pending_reason = 'X' where run_id = ${run.id} and task_id = ${`t_${s}`}`;
    await db.sql`delete from events`;
    for (const s of open) {
      const out = await cancelTaskInstance(db.sql, run.id, `t_${s}`);
      if (out.kind !== 'cancelled') throw new Error(`${s}: ${out.kind}`);
      expect(out.was).toBe(s);
      expect(out.mayHoldProcess, s).toBe(s === 'queued' || s === 'running');
      expect(out.ti).toMatchObject({
        state: 'cancelled',
        error: 'cancelled by user',
        next_try_at: null,
        pending_reason: null,
      });
      expect(out.ti.ended_at).toBeInstanceOf(Date);
      expect(await getTi(db.sql, out.ti.id)).toEqual(out.ti);
    }
    const ev = await eventsOf(run.id);
    expect(ev.map((e) => [e.payload.task_id, e.payload.from, e.payload.to, e.payload.reason])).toEqual(
      open.map((s) => [`t_${s}`, s, 'cancelled', 'cancelled by user']),
    );
    expect((await getRun(db.sql, run.id))!.state).toBe('running');
  });

  it('refuses a task that has ended and writes nothing; answers not found', async () => {
    const ended = TI_STATES.filter(isTerminalTi);
    const run = await newRun(
      dag(
        'cn2',
        ended.map((s) => task(`t_${s}`)),
      ),
    );
    for (const s of ended)
      await db.sql`update task_instances set state = ${s} where run_id = ${run.id} and task_id = ${`t_${s}`}`;
    for (const s of ended) {
      const before = await snapshot(run.id);
      const out = await cancelTaskInstance(db.sql, run.id, `t_${s}`);
      expect(out.kind).toBe('already_ended');
      if (out.kind === 'already_ended') expect(out.ti.state).toBe(s);
      expect(await snapshot(run.id)).toEqual(before);
    }
    expect(await cancelTaskInstance(db.sql, '987654321', 'a')).toEqual({ kind: 'run_not_found' });
    expect(await cancelTaskInstance(db.sql, run.id, 'zz')).toEqual({ kind: 'task_not_found' });
  });

  it('the run goes on by its trigger rules: downstream upstream_failed, an independent branch runs, the run fails', async () => {
    const spec = dag('cn3', [task('slow'), task('after', { dependsOn: ['slow'] }), task('other')]);
    const run = await newRun(spec);
    await transitionRun(db.sql, run.id, 'running');
    const { ti, claim } = await startNext(run.id, 'slow');
    expect((await cancelTaskInstance(db.sql, run.id, 'slow')).kind).toBe('cancelled');
    // The process, stopped, reports a cancelled outcome: the state and the reason stay.
    const stopped: AttemptResult = {
      exitCode: null,
      signal: 'SIGTERM',
      error: 'task slow cancelled',
      outcome: 'cancelled',
    };
    expect(await finishAttempt(db.sql, { tiId: ti.id, ...claim }, stopped)).toBe('cancelled');
    expect((await getTi(db.sql, ti.id))!).toMatchObject({ state: 'cancelled', error: 'cancelled by user', pid: null });
    await plan(run.id);
    expect((await tisOf(run.id)).get('after')!.state).toBe('upstream_failed');
    expect((await getRun(db.sql, run.id))!.state).toBe('running');
    await runAttempt(run.id, 'other', ok);
    await plan(run.id);
    expect((await getRun(db.sql, run.id))!.state).toBe('failed');
    expect([...(await tisOf(run.id)).values()].map((t) => t.state)).toEqual([
      'cancelled',
      'upstream_failed',
      'success',
    ]);
  });
});
