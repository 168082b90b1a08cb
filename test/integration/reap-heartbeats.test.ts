import pino from 'pino';
import type { DagSpec } from '../../src/core/dag-spec.js';
import { describe, expect, it } from 'vitest';
import type { AttemptResult } from '../../src/core/attempt.js';
import { claimAttempt } from '../../src/db/attempts/claim-attempt.js';
import { finishAttempt } from '../../src/db/attempts/finish-attempt.js';
import { flushHeartbeats } from '../../src/db/attempts/flush-heartbeats.js';
import { startAttempt } from '../../src/db/attempts/start-attempt.js';
import { upsertDag } from '../../src/db/dags.js';
import { createLogWriter } from '../../src/db/log-writer.js';
import { reapAttempt } from '../../src/db/reap/reap-attempt.js';
import { staleAttempts } from '../../src/db/reap/stale-attempts.js';
import { createRun } from '../../src/db/runs.js';
import { getTi, transitionTis, type TiRow } from '../../src/db/tis.js';
import { reapHeartbeats } from '../../src/scheduler/phases/reap-heartbeats.js';
import { step } from '../../src/scheduler/step.js';
import { attemptFixtures } from '../helpers/attempt-fixtures.js';
import { databaseForFile } from '../helpers/test-database.js';
import { dag, task } from '../helpers/spec-builders.js';
import { schedulerHarness, type HarnessOptions } from '../helpers/scheduler-harness.js';

const logger = pino({ level: 'silent' });
const BOUND = { timeout: 20_000 };
/** Small, but far above how long a test takes between starting an attempt and reaping. */
const THRESHOLD_MS = 5_000;

// The reaper looks at every attempt of the database: start each test from an empty one.
const db = databaseForFile({ emptyEach: true });

const harness = (over: HarnessOptions = {}) =>
  schedulerHarness(db.sql, { heartbeatThresholdMs: THRESHOLD_MS, ...over });

const { runningRun, claim, started } = attemptFixtures(() => db.sql, 'subprocess');

/** Ages every sign of life of a TI by the given SQL interval (`heartbeat_at` etc. keep their nulls). */
async function age(tiId: string, interval = '10 minutes') {
  await db.sql`
    update task_instances set
      queued_at = queued_at - ${interval}::interval,
      started_at = started_at - ${interval}::interval,
      heartbeat_at = heartbeat_at - ${interval}::interval
    where id = ${tiId}`;
}

/** Task `a` of a running run of `spec`, started and then silent: its heartbeat ten minutes old. */
async function staleAttempt(spec: DagSpec) {
  const { run, tis } = await runningRun(spec);
  const a = await started(run.id, tis.get('a')!);
  await age(a.tiId);
  return { run, a };
}

async function ti(tiId: string): Promise<TiRow> {
  return (await getTi(db.sql, tiId))!;
}

async function tiEvents(tiId: string) {
  return db.sql<{ kind: string; payload: Record<string, unknown> }[]>`
    select kind, payload from events where ti_id = ${tiId} order by seq`;
}

const OK: AttemptResult = { exitCode: 0, signal: null, error: null, outcome: 'success' };
const FAIL: AttemptResult = { exitCode: 1, signal: null, error: 'exit code 1', outcome: 'failed' };

/** A pass's result: nothing reaped but what `o` says. */
const reaped = (o: object) => ({
  candidates: 0,
  retried: 0,
  failed: 0,
  errors: 0,
  heldLive: 0,
  heldOff: false,
  runIds: [],
  ...o,
});
/** `reaped(o)` but its run ids, for a pass whose runs the test counts instead. */
const reapedCounts = (o: object) => {
  const { runIds: _, ...counts } = reaped(o);
  return counts;
};

describe('reapHeartbeats', () => {
  it('moves a running attempt with a stale heartbeat and tries left to up_for_retry, with backoff', BOUND, async () => {
    const { run, a } = await staleAttempt(dag('hb_retry', [task('a', { retries: 2, retryDelayMs: 60_000 })]));
    const h = harness();

    const r = await reapHeartbeats(h.ctx);
    expect(r).toEqual(reaped({ candidates: 1, retried: 1, runIds: [run.id] }));
    const row = await ti(a.tiId);
    // The lost attempt's token dies with it: nothing its holder reports later can match.
    expect(row).toMatchObject({ state: 'up_for_retry', try_number: 1, pid: null, attempt_token: null });
    expect(row.error).toMatch(/^agent_lost: no heartbeat for more than 5s \(last sign of life /);
    expect(row.ended_at).toBeInstanceOf(Date);
    // Backoff of try 1 is the task's retry_delay, counted from the reap (same statement).
    const [gap] = await db.sql<{ ms: number }[]>`
      select (extract(epoch from next_try_at - ended_at) * 1000)::int as ms from task_instances where id = ${a.tiId}`;
    expect(gap!.ms).toBe(60_000);
    expect(row.next_try_at!.getTime()).toBeGreaterThan(Date.now() + 50_000);

    const evs = await tiEvents(a.tiId);
    expect(evs.at(-1)).toMatchObject({
      kind: 'ti.state',
      payload: { task_id: 'a', to: 'up_for_retry', try: 1, reason: 'agent_lost', error: row.error },
    });
    expect(evs.at(-1)!.payload.next_try_at).toEqual(expect.any(String));
    expect(h.reaped).toEqual([{ kind: 'ti', count: 1 }]);
    expect(h.agentLost).toEqual([1]);
    expect(h.errors).toEqual([]);

    // Once reaped, the row is no longer a candidate: a second pass changes nothing.
    expect(await reapHeartbeats(h.ctx)).toEqual(reaped({}));
    expect(h.reaped).toHaveLength(1);
  });

  it('fails an attempt with a stale heartbeat and no tries left', BOUND, async () => {
    const { run, a } = await staleAttempt(dag('hb_fail', [task('a', { retries: 0 })]));
    const h = harness();

    expect(await reapHeartbeats(h.ctx)).toMatchObject({ candidates: 1, retried: 0, failed: 1, errors: 0 });
    const row = await ti(a.tiId);
    expect(row).toMatchObject({ state: 'failed', next_try_at: null, attempt_token: null });
    expect(row.error).toMatch(/^agent_lost:/);
    expect((await tiEvents(a.tiId)).at(-1)!.payload).toMatchObject({
      to: 'failed',
      reason: 'agent_lost',
      next_try_at: null,
    });
    expect(h.reaped).toEqual([{ kind: 'ti', count: 1 }]);
    expect(h.agentLost).toEqual([1]);
  });

  it('never touches an attempt that heartbeats, however long it has been running', BOUND, async () => {
    const { run, tis } = await runningRun(dag('hb_fresh', [task('fresh'), task('long')]));
    const fresh = await started(run.id, tis.get('fresh')!);
    const long = await started(run.id, tis.get('long')!);
    // Running for an hour, but its holder heartbeated just now.
    await db.sql`update task_instances set queued_at = now() - interval '1 hour', started_at = now() - interval '1 hour'
                 where id = ${long.tiId}`;
    expect(await flushHeartbeats(db.sql, [long])).toEqual(new Set([long.tiId]));
    const before = [await ti(fresh.tiId), await ti(long.tiId)];
    const h = harness();

    expect(await reapHeartbeats(h.ctx)).toEqual(reaped({}));
    expect([await ti(fresh.tiId), await ti(long.tiId)]).toEqual(before);
    expect(h.reaped).toEqual([]);
    expect(h.agentLost).toEqual([]);
  });

  it('reaps a queued attempt that never started, by its queued_at', BOUND, async () => {
    const { run, tis } = await runningRun(dag('hb_queued', [task('old', { retries: 1 }), task('new')]));
    const old = await claim(run.id, tis.get('old')!);
    const recent = await claim(run.id, tis.get('new')!);
    await age(old.tiId);
    const row = await ti(old.tiId);
    expect(row).toMatchObject({ state: 'queued', started_at: null, heartbeat_at: null });

    const r = await reapHeartbeats(harness().ctx);
    expect(r).toMatchObject({ candidates: 1, retried: 1, failed: 0 });
    const reaped = await ti(old.tiId);
    expect(reaped.state).toBe('up_for_retry');
    expect(reaped.error).toContain(`last sign of life ${row.queued_at!.toISOString()}`);
    expect((await ti(recent.tiId)).state).toBe('queued');
  });

  it('judges an attempt that never heartbeated by its started_at, not its queued_at', BOUND, async () => {
    const { run, tis } = await runningRun(dag('hb_started', [task('stale'), task('fresh')]));
    const stale = await started(run.id, tis.get('stale')!);
    const fresh = await started(run.id, tis.get('fresh')!);
    await db.sql`update task_instances set heartbeat_at = null where id in ${db.sql([stale.tiId, fresh.tiId])}`;
    await db.sql`update task_instances set queued_at = now() - interval '20 minutes', started_at = now() - interval '10 minutes'
                 where id = ${stale.tiId}`;
    // Claimed long ago, but started just now: alive by its start.
    await db.sql`update task_instances set queued_at = now() - interval '20 minutes' where id = ${fresh.tiId}`;
    const startedAt = (await ti(stale.tiId)).started_at!;

    const candidates = await staleAttempts(db.sql, THRESHOLD_MS, 100);
    expect(candidates.map((c) => c.id)).toEqual([stale.tiId]);
    expect(candidates[0]!.last_seen).toEqual(startedAt);

    expect(await reapHeartbeats(harness().ctx)).toMatchObject({ candidates: 1, failed: 1 });
    expect((await ti(stale.tiId)).state).toBe('failed');
    expect((await ti(fresh.tiId)).state).toBe('running');
  });

  it('is saved by a heartbeat that lands between the candidate read and the write', BOUND, async () => {
    const { run, a } = await staleAttempt(dag('hb_race', [task('a', { retries: 3 })]));

    const [candidate] = await staleAttempts(db.sql, THRESHOLD_MS, 100);
    expect(candidate).toMatchObject({ id: a.tiId, try_number: 1, attempt_token: a.attemptToken, state: 'running' });
    expect(await flushHeartbeats(db.sql, [a])).toEqual(new Set([a.tiId]));
    const before = await ti(a.tiId);
    const eventsBefore = await tiEvents(a.tiId);

    expect(await reapAttempt(db.sql, candidate!, THRESHOLD_MS)).toBe('skipped');
    expect(await ti(a.tiId)).toEqual(before);
    expect(before.state).toBe('running');
    expect(await tiEvents(a.tiId)).toEqual(eventsBefore);
  });

  it('never reaps a newer attempt through a stale candidate row of a superseded one', BOUND, async () => {
    const { run, a: first } = await staleAttempt(dag('hb_fence', [task('a', { retries: 3 })]));
    const [candidate] = await staleAttempts(db.sql, THRESHOLD_MS, 100);
    expect(candidate!.attempt_token).toBe(first.attemptToken);

    // Meanwhile the attempt ended and the TI was re-claimed for try 2, which is itself silent
    // for long enough that only the fence (try number and token) protects it.
    expect(await finishAttempt(db.sql, first, FAIL)).toBe('up_for_retry');
    const second = await claim(run.id, await ti(first.tiId));
    expect(second.tryNumber).toBe(2);
    await age(second.tiId);
    const before = await ti(second.tiId);

    expect(await reapAttempt(db.sql, candidate!, THRESHOLD_MS)).toBe('skipped');
    expect(await ti(second.tiId)).toEqual(before);
    expect(before).toMatchObject({ state: 'queued', try_number: 2, attempt_token: second.attemptToken });
  });

  it('holds off for a whole threshold after the database was last unreachable', BOUND, async () => {
    const { run, a } = await staleAttempt(dag('hb_holdoff', [task('a')]));
    const since = new Date();
    const h = harness({ health: { healthySince: since } });
    h.clock.now = since;

    expect(await reapHeartbeats(h.ctx)).toEqual(reaped({ heldOff: true }));
    h.clock.now = new Date(since.getTime() + THRESHOLD_MS - 1);
    expect((await reapHeartbeats(h.ctx)).heldOff).toBe(true);
    expect((await ti(a.tiId)).state).toBe('running');
    expect(h.reaped).toEqual([]);

    h.clock.now = new Date(since.getTime() + THRESHOLD_MS);
    expect(await reapHeartbeats(h.ctx)).toMatchObject({ candidates: 1, failed: 1, heldOff: false });
    expect((await ti(a.tiId)).state).toBe('failed');
  });

  it('reaps the other candidates when one of them fails to write', BOUND, async () => {
    const { run, tis } = await runningRun(dag('hb_isolated', [task('a'), task('bad'), task('c', { retries: 1 })]));
    const attempts = [
      await started(run.id, tis.get('a')!),
      await started(run.id, tis.get('bad')!),
      await started(run.id, tis.get('c')!),
    ];
    for (const a of attempts) await age(a.tiId);
    const badId = tis.get('bad')!.id;
    await db.sql.unsafe(`
      create function test_fail_bad_ti() returns trigger language plpgsql as $$
      begin
        if new.task_id = 'bad' then raise exception 'injected failure for TI %', new.id; end if;
        return new;
      end $$;
      create trigger test_fail_bad_ti before update on task_instances for each row execute function test_fail_bad_ti();`);
    const h = harness();
    try {
      const r = await reapHeartbeats(h.ctx);
      expect(r).toMatchObject({ candidates: 3, retried: 1, failed: 1, errors: 1, heldLive: 0, heldOff: false });
      expect(r.runIds).toHaveLength(2);
    } finally {
      await db.sql.unsafe(`drop trigger test_fail_bad_ti on task_instances; drop function test_fail_bad_ti();`);
    }
    expect((await ti(tis.get('a')!.id)).state).toBe('failed');
    expect((await ti(tis.get('c')!.id)).state).toBe('up_for_retry');
    expect((await ti(badId)).state).toBe('running');
    expect(h.errors).toHaveLength(1);
    expect(h.errors[0]).toMatchObject({ phase: 'reap-heartbeats', ids: { tiId: badId, runId: run.id } });
    expect((h.errors[0]!.err as Error).message).toContain(`injected failure for TI ${badId}`);
    expect(h.reaped).toEqual([{ kind: 'ti', count: 2 }]);
    expect(h.agentLost).toEqual([2]);

    // The failure was the candidate's alone: the next pass reaps it.
    expect(await reapHeartbeats(h.ctx)).toMatchObject({ candidates: 1, failed: 1, errors: 0 });
    expect((await ti(badId)).state).toBe('failed');
  });

  it('looks at no more than 100 candidates per step', BOUND, async () => {
    const spec = dag(
      'hb_many',
      Array.from({ length: 120 }, (_, i) => task(`t${String(i).padStart(3, '0')}`)),
    );
    const { run, tis } = await runningRun(spec);
    await transitionTis(db.sql, run.id, [...tis.keys()], 'scheduled');
    for (const t of tis.values()) {
      const c = (await claimAttempt(db.sql, t.id, 'subprocess'))!;
      expect(
        await startAttempt(
          db.sql,
          { tiId: t.id, tryNumber: c.tryNumber, attemptToken: c.attemptToken },
          { pid: 1, agentId: null },
        ),
      ).toBe(true);
    }
    await db.sql`update task_instances set heartbeat_at = now() - interval '10 minutes' where run_id = ${run.id}`;
    const h = harness();
    const count = async (state: string) =>
      (
        await db.sql<
          { n: number }[]
        >`select count(*)::int as n from task_instances where run_id = ${run.id} and state = ${state}`
      )[0]!.n;

    const s1 = await step(h.ctx);
    expect(s1.failedPhases).toEqual([]);
    expect(s1.reapHeartbeats).toMatchObject(reapedCounts({ candidates: 100, failed: 100 }));
    expect(s1.reapHeartbeats!.runIds).toHaveLength(100);
    expect(await count('failed')).toBe(100);
    expect(await count('running')).toBe(20);

    const s2 = await step(h.ctx);
    expect(s2.reapHeartbeats).toMatchObject(reapedCounts({ candidates: 20, failed: 20 }));
    expect(s2.reapHeartbeats!.runIds).toHaveLength(20);
    expect(await count('failed')).toBe(120);
    expect(h.reaped).toEqual([
      { kind: 'ti', count: 100 },
      { kind: 'ti', count: 20 },
    ]);
    expect(h.agentLost).toEqual([100, 20]);
    const [evs] = await db.sql<{ n: number }[]>`
      select count(*)::int as n from events where run_id = ${run.id} and payload->>'reason' = 'agent_lost'`;
    expect(evs!.n).toBe(120);

    // With every TI ended, the planner finalizes the run on the next step.
    const s3 = await step(h.ctx);
    expect(s3.plan).toMatchObject({ runsFinalized: 1 });
    expect(s3.reapHeartbeats).toMatchObject({ candidates: 0 });
    expect(h.errors).toEqual([]);
  });

  it('after a reap, the planner retries the TI and every report of the lost attempt is refused', BOUND, async () => {
    const { run, a: lost } = await staleAttempt(dag('hb_zombie', [task('a', { retries: 1, retryDelayMs: 60_000 })]));
    const h = harness();

    const s1 = await step(h.ctx);
    expect(s1.failedPhases).toEqual([]);
    expect(s1.reapHeartbeats).toMatchObject({ retried: 1 });
    const nextTryAt = (await ti(lost.tiId)).next_try_at!;

    // Still backing off: the planner leaves it, saying until when.
    h.clock.now = new Date(nextTryAt.getTime() - 1);
    await step(h.ctx);
    expect(await ti(lost.tiId)).toMatchObject({
      state: 'up_for_retry',
      pending_reason: `RETRY_BACKOFF_UNTIL:${nextTryAt.toISOString()}`,
    });
    expect(h.offered).toEqual([]);

    h.clock.now = nextTryAt;
    const s3 = await step(h.ctx);
    expect(s3.plan).toMatchObject({ offered: 1, errors: 0 });
    expect(await ti(lost.tiId)).toMatchObject({ state: 'scheduled', pending_reason: null });
    expect(h.offered.map((i) => i.tiId)).toEqual([lost.tiId]);

    // The zombie wakes up: its start, heartbeat and end are refused and change nothing.
    const before = await ti(lost.tiId);
    expect(await finishAttempt(db.sql, lost, OK)).toBe('rejected');
    expect(await startAttempt(db.sql, lost, { pid: 1, agentId: null })).toBe(false);
    expect(await flushHeartbeats(db.sql, [lost])).toEqual(new Set());
    const rejected: number[] = [];
    const logs = createLogWriter(db.sql, logger, {
      flushMs: 60_000,
      maxBatch: 1000,
      onRejected: (n) => rejected.push(n),
    });
    logs.write(lost.tiId, lost.tryNumber, lost.attemptToken, 'stdout', 'zombie line 1');
    await logs.flush();
    expect(rejected).toEqual([1]);
    expect(await ti(lost.tiId)).toEqual(before);

    // The dispatcher claims the offered TI for try 2: the zombie's lines are still refused, the
    // new attempt's are stored.
    const next = await claim(run.id, before);
    expect(next.tryNumber).toBe(2);
    logs.write(lost.tiId, lost.tryNumber, lost.attemptToken, 'stdout', 'zombie line 2');
    logs.write(lost.tiId, lost.tryNumber, lost.attemptToken, 'stderr', 'zombie line 3');
    logs.write(next.tiId, next.tryNumber, next.attemptToken, 'stdout', 'try 2 line');
    await logs.close();
    const stored = await db.sql<{ try_number: number; line: string }[]>`
      select try_number, line from task_logs where ti_id = ${lost.tiId} order by try_number, seq`;
    expect(stored).toEqual([{ try_number: 2, line: 'try 2 line' }]);
    expect(rejected).toEqual([1, 2]);
    expect(h.errors).toEqual([]);
  });
});

describe('a sign of life in this replica', () => {
  it('beats a stale heartbeat column: an attempt whose process runs here is never reaped', async () => {
    const { claimAttempt } = await import('../../src/db/attempts/claim-attempt.js');
    const { startAttempt } = await import('../../src/db/attempts/start-attempt.js');
    const { upsertDag } = await import('../../src/db/dags.js');
    const { createRun } = await import('../../src/db/runs.js');
    const spec = dag('alive_here', [task('a', { retries: 1 })]);
    const { dag: row } = await upsertDag(db.sql, spec, 'alive_here.yaml');
    const { run } = await db.sql.begin((tx) =>
      createRun(tx, {
        dagId: spec.dagId,
        dagVersion: row.version,
        runKey: 'k',
        runType: 'manual',
        logicalDate: new Date(),
        conf: {},
        defaultExecutor: 'subprocess',
      }),
    );
    const [ti] = await db.sql<{ id: string }[]>`select id from task_instances where run_id = ${run.id}`;
    await db.sql`update task_instances set state = 'scheduled' where id = ${ti!.id}`;
    await db.sql`update dag_runs set state = 'running' where id = ${run.id}`;
    const claim = (await claimAttempt(db.sql, ti!.id, 'subprocess'))!;
    await startAttempt(db.sql, { tiId: ti!.id, ...claim }, { pid: 1, agentId: null });
    await db.sql`update task_instances set heartbeat_at = now() - interval '1 hour' where id = ${ti!.id}`;

    const h = harness();
    h.script.holdsLive = (tiId, token) => tiId === ti!.id && token === claim.attemptToken;
    const r = await reapHeartbeats(h.ctx);
    expect(r).toMatchObject({ candidates: 1, retried: 0, failed: 0, heldLive: 1 });
    expect((await getTi(db.sql, ti!.id))!.state).toBe('running');

    // Once this replica no longer runs it, the stale column decides.
    h.script.holdsLive = () => false;
    expect(await reapHeartbeats(h.ctx)).toMatchObject({ retried: 1, heldLive: 0 });
  });
});
