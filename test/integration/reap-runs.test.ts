import { describe, expect, it } from 'vitest';
import type { TiState } from '../../src/core/states.js';
import type { DagSpec } from '../../src/core/dag-spec.js';
import { upsertDag } from '../../src/db/dags.js';
import { orphanRuns, reapRun } from '../../src/db/reap/orphan-runs.js';
import { createRun, getRun, poisonRun, transitionRun, type RunRow } from '../../src/db/runs.js';
import { reapRuns } from '../../src/scheduler/phases/reap-runs.js';
import { step } from '../../src/scheduler/step.js';
import { databaseForFile } from '../helpers/test-database.js';
import { dag, task } from '../helpers/spec-builders.js';
import { schedulerHarness, type HarnessOptions } from '../helpers/scheduler-harness.js';
import { attemptFixtures } from '../helpers/attempt-fixtures.js';

const BOUND = { timeout: 20_000 };
const THRESHOLD_MS = 60_000;

// The reaper looks at every run of the database: start each test from an empty one.
const db = databaseForFile({ emptyEach: true });

const harness = (over: HarnessOptions = {}) =>
  schedulerHarness(db.sql, { runOrphanThresholdMs: THRESHOLD_MS, ...over });

const SPEC = dag('rr', [task('a'), task('b'), task('c')]);
const fixtures = attemptFixtures(() => db.sql, 'subprocess');

/** A running run, started `startedAgo` ago, whose TIs are put in the given states (test
 *  arrangement, not the state machine); terminal ones ended `endedAgo` ago. */
async function runWith(
  tiStates: Partial<Record<string, TiState>>,
  opts: { spec?: DagSpec; endedAgo?: string; startedAgo?: string } = {},
): Promise<RunRow> {
  const spec = opts.spec ?? SPEC;
  const { run } = await fixtures.runningRun(spec);
  await db.sql`update dag_runs set started_at = now() - ${opts.startedAgo ?? '20 minutes'}::interval where id = ${run.id}`;
  for (const [taskId, state] of Object.entries(tiStates)) {
    const ended =
      state === 'success' ||
      state === 'failed' ||
      state === 'upstream_failed' ||
      state === 'skipped' ||
      state === 'cancelled';
    await db.sql`
      update task_instances set state = ${state!},
        ended_at = case when ${ended} then now() - ${opts.endedAgo ?? '10 minutes'}::interval end
      where run_id = ${run.id} and task_id = ${taskId}`;
  }
  return (await getRun(db.sql, run.id))!;
}

async function runEvents(runId: string) {
  return db.sql<{ kind: string; payload: Record<string, unknown> }[]>`
    select kind, payload from events where run_id = ${runId} and ti_id is null order by seq`;
}

describe('reapRuns', () => {
  it('finalizes a running run whose TIs all settled long ago: failed or success', BOUND, async () => {
    const failed = await runWith({ a: 'success', b: 'failed', c: 'skipped' });
    const upstreamFailed = await runWith({ a: 'failed', b: 'upstream_failed', c: 'upstream_failed' });
    const cancelled = await runWith({ a: 'success', b: 'cancelled', c: 'success' });
    const neverStarted = await runWith({ a: 'success', b: 'success' }); // c is still `none`
    const success = await runWith({ a: 'success', b: 'skipped', c: 'success' });
    const h = harness();

    const r = await reapRuns(h.ctx);
    expect(r).toEqual({ candidates: 5, finalized: 5, errors: 0 });
    for (const [run, state] of [
      [failed, 'failed'],
      [upstreamFailed, 'failed'],
      [cancelled, 'failed'],
      [neverStarted, 'failed'],
      [success, 'success'],
    ] as const) {
      const row = (await getRun(db.sql, run.id))!;
      expect(row.state, `run ${run.id}`).toBe(state);
      expect(row.ended_at).toBeInstanceOf(Date);
      expect(row.ended_at!.getTime()).toBeGreaterThan(row.started_at!.getTime());
      expect(row.settled_at).toBeInstanceOf(Date);
      expect((await runEvents(run.id)).at(-1)).toEqual({
        kind: 'run.state',
        payload: { to: state, reason: 'orphan_reaped' },
      });
    }
    expect(h.reaped).toEqual([{ kind: 'run', count: 5 }]);
    expect(h.errors).toEqual([]);
  });

  it('leaves a run whose last TI ended recently', BOUND, async () => {
    const recent = await runWith({ a: 'success', b: 'success', c: 'failed' }, { endedAgo: '1 second' });
    // Started recently, nothing ended yet (every TI `none`): also too young.
    const young = await runWith({}, { startedAgo: '1 second' });
    const h = harness();

    expect(await reapRuns(h.ctx)).toEqual({ candidates: 0, finalized: 0, errors: 0 });
    expect((await getRun(db.sql, recent.id))!).toEqual(recent);
    expect((await getRun(db.sql, young.id))!).toEqual(young);
    expect(h.reaped).toEqual([]);
  });

  it('never touches a run with a TI in flight, however old', BOUND, async () => {
    const runs: RunRow[] = [];
    for (const inFlight of ['running', 'queued', 'scheduled', 'up_for_retry'] as const) {
      runs.push(await runWith({ a: 'success', b: 'failed', c: inFlight }, { startedAgo: '2 days', endedAgo: '1 day' }));
    }
    const h = harness();

    expect(await reapRuns(h.ctx)).toEqual({ candidates: 0, finalized: 0, errors: 0 });
    for (const run of runs) expect((await getRun(db.sql, run.id))!).toEqual(run);
  });

  it('leaves queued and already-ended runs alone', BOUND, async () => {
    const ended = await runWith({ a: 'success', b: 'success', c: 'success' });
    expect(await transitionRun(db.sql, ended.id, 'success')).toBe(true);
    const queued = await runWith({});
    await db.sql`update dag_runs set state = 'queued', started_at = null, created_at = now() - interval '1 day' where id = ${queued.id}`;
    const before = [(await getRun(db.sql, ended.id))!, (await getRun(db.sql, queued.id))!];

    expect(await reapRuns(harness().ctx)).toEqual({ candidates: 0, finalized: 0, errors: 0 });
    expect([(await getRun(db.sql, ended.id))!, (await getRun(db.sql, queued.id))!]).toEqual(before);
  });

  it('finalizes a poisoned run, which the planner skips', BOUND, async () => {
    const run = await runWith({ a: 'success', b: 'failed' }); // c never started
    await poisonRun(db.sql, run.id, 'cannot advance');
    const h = harness();

    const r = await step(h.ctx);
    expect(r.failedPhases).toEqual([]);
    expect(r.plan).toMatchObject({ runsAdvanced: 0, runsFinalized: 0 });
    expect(r.reapRuns).toEqual({ candidates: 1, finalized: 1, errors: 0 });
    expect((await getRun(db.sql, run.id))!).toMatchObject({ state: 'failed', poison_error: 'cannot advance' });
    expect((await runEvents(run.id)).map((e) => e.kind)).toEqual([
      'run.state',
      'run.state',
      'run.poisoned',
      'run.state',
    ]);
    expect(h.reaped).toEqual([{ kind: 'run', count: 1 }]);
  });

  it('looks at no more than 100 runs per step', BOUND, async () => {
    const spec = dag('rr_many', [task('a')]);
    const { dag: row } = await upsertDag(db.sql, spec, 'rr_many.yaml');
    await db.sql.begin(async (tx) => {
      for (let i = 0; i < 120; i++) {
        await createRun(tx, {
          dagId: spec.dagId,
          dagVersion: row.version,
          runKey: `manual__many_${i}`,
          runType: 'manual',
          logicalDate: new Date('2026-02-01T00:00:00Z'),
          conf: {},
          defaultExecutor: 'subprocess',
        });
      }
    });
    await db.sql`update dag_runs set state = 'running', started_at = now() - interval '1 hour' where dag_id = 'rr_many'`;
    await db.sql`update task_instances t set state = 'success', ended_at = now() - interval '30 minutes'
                 from dag_runs r where r.id = t.run_id and r.dag_id = 'rr_many'`;
    const count = async (state: string) =>
      (
        await db.sql<
          { n: number }[]
        >`select count(*)::int as n from dag_runs where dag_id = 'rr_many' and state = ${state}`
      )[0]!.n;
    const h = harness();

    expect(await reapRuns(h.ctx)).toEqual({ candidates: 100, finalized: 100, errors: 0 });
    expect(await count('success')).toBe(100);
    expect(await reapRuns(h.ctx)).toEqual({ candidates: 20, finalized: 20, errors: 0 });
    expect(await count('success')).toBe(120);
    expect(h.reaped).toEqual([
      { kind: 'run', count: 100 },
      { kind: 'run', count: 20 },
    ]);
  });

  it('finalizes the other runs when one of them fails to write, and counts the failure', BOUND, async () => {
    const first = await runWith({ a: 'success', b: 'success', c: 'success' });
    const bad = await runWith({ a: 'success', b: 'success', c: 'success' });
    const last = await runWith({ a: 'failed', b: 'success', c: 'success' });
    await db.sql.unsafe(`
      create function test_fail_bad_run() returns trigger language plpgsql as $$
      begin
        if old.id = ${Number(bad.id)} then raise exception 'injected failure for run %', old.id; end if;
        return new;
      end $$;
      create trigger test_fail_bad_run before update on dag_runs for each row execute function test_fail_bad_run();`);
    const h = harness();
    try {
      expect(await reapRuns(h.ctx)).toEqual({ candidates: 3, finalized: 2, errors: 1 });
    } finally {
      await db.sql.unsafe(`drop trigger test_fail_bad_run on dag_runs; drop function test_fail_bad_run();`);
    }
    expect((await getRun(db.sql, first.id))!.state).toBe('success');
    expect((await getRun(db.sql, last.id))!.state).toBe('failed');
    // The failed write left nothing behind: no state change, no event.
    expect((await getRun(db.sql, bad.id))!).toEqual(bad);
    expect((await runEvents(bad.id)).some((e) => e.payload.reason === 'orphan_reaped')).toBe(false);
    expect(h.errors).toHaveLength(1);
    expect(h.errors[0]).toMatchObject({ phase: 'reap-runs', ids: { runId: bad.id, dagId: 'rr' } });
    expect((h.errors[0]!.err as Error).message).toContain(`injected failure for run ${bad.id}`);
    expect(h.reaped).toEqual([{ kind: 'run', count: 2 }]);

    expect(await reapRuns(h.ctx)).toEqual({ candidates: 1, finalized: 1, errors: 0 });
    expect((await getRun(db.sql, bad.id))!.state).toBe('success');
  });

  it('re-checks in the write: a run whose TI was re-opened after the read is left running', BOUND, async () => {
    const run = await runWith({ a: 'success', b: 'failed', c: 'success' });
    const candidates = (await orphanRuns(db.sql, THRESHOLD_MS, 100)).runs;
    expect(candidates).toEqual([{ id: run.id, dag_id: 'rr' }]);
    // Between the read and the write, b is cleared and scheduled again.
    await db.sql`update task_instances set state = 'scheduled', ended_at = null where run_id = ${run.id} and task_id = 'b'`;

    expect(await reapRun(db.sql, run.id, THRESHOLD_MS)).toBeNull();
    expect((await getRun(db.sql, run.id))!.state).toBe('running');
    expect((await runEvents(run.id)).some((e) => e.payload.reason === 'orphan_reaped')).toBe(false);
  });

  it('with a sweep, looks at a stretch of the running runs a step and goes round them all', BOUND, async () => {
    // A live run among the orphans: looked at, never reaped, and it counts in the stretch.
    const runs = [
      await runWith({ a: 'success', b: 'success', c: 'success' }),
      await runWith({ a: 'running' }),
      await runWith({ a: 'success', b: 'success', c: 'success' }),
      await runWith({ a: 'success', b: 'success', c: 'success' }),
      await runWith({ a: 'success', b: 'success', c: 'success' }),
    ];
    const h = harness({ sweep: { cursor: '0' }, sweepRunsPerStep: 2 });
    const finalized = async () =>
      (await Promise.all(runs.map(async (r) => (await getRun(db.sql, r.id))!.state))).map((st) => st !== 'running');
    expect(await reapRuns(h.ctx)).toMatchObject({ candidates: 1, finalized: 1 });
    expect(h.ctx.sweep!.orphansAfter).toBe(runs[1]!.id);
    expect(await finalized()).toEqual([true, false, false, false, false]);
    expect(await reapRuns(h.ctx)).toMatchObject({ candidates: 2, finalized: 2 });
    // The last stretch was short (one run left of two): the next starts over.
    expect(await reapRuns(h.ctx)).toMatchObject({ candidates: 1, finalized: 1 });
    expect(h.ctx.sweep!.orphansAfter).toBe('0');
    expect(await finalized()).toEqual([true, false, true, true, true]);
  });

  it('is harmless when two leaders reap at once or one after the other', BOUND, async () => {
    const runs = [
      await runWith({ a: 'success', b: 'success', c: 'success' }),
      await runWith({ a: 'failed', b: 'upstream_failed', c: 'upstream_failed' }),
      await runWith({ a: 'cancelled', b: 'cancelled', c: 'cancelled' }),
    ];
    const one = harness();
    const two = harness();

    // Both read the same candidates and race for the writes: each run is finalized once.
    const [r1, r2] = await Promise.all([reapRuns(one.ctx), reapRuns(two.ctx)]);
    expect(r1.finalized + r2.finalized).toBe(3);
    expect(r1.errors + r2.errors).toBe(0);
    const after = await Promise.all(runs.map(async (r) => (await getRun(db.sql, r.id))!));
    expect(after.map((r) => r.state)).toEqual(['success', 'failed', 'failed']);
    for (const r of runs) {
      expect((await runEvents(r.id)).filter((e) => e.payload.reason === 'orphan_reaped')).toHaveLength(1);
    }

    // A leader acting on a stale candidate list changes nothing either.
    for (const r of runs) expect(await reapRun(db.sql, r.id, THRESHOLD_MS)).toBeNull();
    expect(await reapRuns(two.ctx)).toEqual({ candidates: 0, finalized: 0, errors: 0 });
    expect(await Promise.all(runs.map(async (r) => (await getRun(db.sql, r.id))!))).toEqual(after);
    const [events] = await db.sql<
      { n: number }[]
    >`select count(*)::int as n from events where payload->>'reason' = 'orphan_reaped'`;
    expect(events!.n).toBe(3);
    expect([...one.errors, ...two.errors]).toEqual([]);
  });
});

describe('paused DAGs', () => {
  it('never reaps a paused DAG run whose tasks wait on purpose, and reaps it once unpaused', BOUND, async () => {
    const run = await runWith({ a: 'success', b: 'none', c: 'none' });
    await db.sql`update dags set paused = true where dag_id = 'rr'`;
    try {
      expect((await orphanRuns(db.sql, THRESHOLD_MS, 100)).runs).toEqual([]);
      expect(await reapRun(db.sql, run.id, THRESHOLD_MS)).toBeNull();
      expect((await getRun(db.sql, run.id))!.state).toBe('running');
    } finally {
      await db.sql`update dags set paused = false where dag_id = 'rr'`;
    }
    expect((await orphanRuns(db.sql, THRESHOLD_MS, 100)).runs).toEqual([{ id: run.id, dag_id: 'rr' }]);
  });
});
