import { describe, expect, it } from 'vitest';
import type { AttemptResult } from '../../src/core/attempt.js';
import type { DagSpec } from '../../src/core/dag-spec.js';
import { retryDelayMs } from '../../src/core/advance-run.js';
import {
  RUN_STATES,
  TI_STATES,
  canTransitionRun,
  canTransitionTi,
  isTerminalRun,
  type RunStateName,
  type TiState,
} from '../../src/core/states.js';
import { claimAttempt } from '../../src/db/attempts/claim-attempt.js';
import { finishAttempt } from '../../src/db/attempts/finish-attempt.js';
import { flushHeartbeats } from '../../src/db/attempts/flush-heartbeats.js';
import { startAttempt } from '../../src/db/attempts/start-attempt.js';
import { finalizeRuns } from '../../src/db/plan/finalize-runs.js';
import { getRun, transitionRun } from '../../src/db/runs.js';
import { getTi, listTis, transitionTis } from '../../src/db/tis.js';
import { databaseForFile } from '../helpers/test-database.js';
import { dag, task } from '../helpers/spec-builders.js';
import { attemptFixtures } from '../helpers/attempt-fixtures.js';

const db = databaseForFile({ emptyEach: true });

const fixtures = attemptFixtures(() => db.sql, 'subprocess');
/** Applies the DAG (idempotent) and creates a fresh queued run with one TI per task. */
const newRun = (spec: DagSpec) => fixtures.queuedRun(spec, { logicalDate: new Date() });

/** Test arrangement only: puts rows in a given state without going through the state machine. */
async function forceTi(tiId: string, state: TiState) {
  await db.sql`update task_instances set state = ${state} where id = ${tiId}`;
}
async function forceRun(runId: string, state: RunStateName) {
  await db.sql`update dag_runs set state = ${state} where id = ${runId}`;
}

async function events(filter: { runId?: string; tiId?: string }) {
  if (filter.tiId)
    return db.sql<
      { kind: string; payload: Record<string, unknown> }[]
    >`select kind, payload from events where ti_id = ${filter.tiId} order by seq`;
  return db.sql<
    { kind: string; payload: Record<string, unknown> }[]
  >`select kind, payload from events where run_id = ${filter.runId!} and ti_id is null order by seq`;
}
async function eventCount(): Promise<number> {
  const [r] = await db.sql<{ n: number }[]>`select count(*)::int as n from events`;
  return r!.n;
}

const fail = (error = 'exit code 1'): AttemptResult => ({ exitCode: 1, signal: null, error, outcome: 'failed' });
const ok: AttemptResult = { exitCode: 0, signal: null, error: null, outcome: 'success' };

/** A run that is running, with TI `a` claimed (queued) for a new attempt. */
async function claimedTi(spec: DagSpec, taskId = 'a') {
  const { run, tis } = await newRun(spec);
  expect(await transitionRun(db.sql, run.id, 'running')).toBe(true);
  const ti = tis.get(taskId)!;
  expect(await transitionTis(db.sql, run.id, [taskId], 'scheduled')).toEqual([ti.id]);
  const claim = await claimAttempt(db.sql, ti.id, 'subprocess');
  expect(claim).not.toBeNull();
  return { run, ti, claim: claim! };
}

describe('transitionTis', () => {
  it('moves a TI only from a legal state, once, with one event per move', async () => {
    const { run, tis } = await newRun(dag('t1', [task('a')]));
    const a = tis.get('a')!;
    expect(a.state).toBe('none');
    expect(a.pending_reason).toBe('RUN_QUEUED');
    const before = await eventCount();

    expect(await transitionTis(db.sql, run.id, ['a'], 'scheduled')).toEqual([a.id]);
    const after = (await getTi(db.sql, a.id))!;
    expect(after.state).toBe('scheduled');
    expect(after.pending_reason).toBeNull();
    expect(await eventCount()).toBe(before + 1);
    expect(await events({ tiId: a.id })).toEqual([
      { kind: 'ti.state', payload: { task_id: 'a', to: 'scheduled', try: 0 } },
    ]);

    // scheduled → scheduled is not a move: nothing changes and nothing is logged.
    expect(await transitionTis(db.sql, run.id, ['a'], 'scheduled')).toEqual([]);
    expect(await eventCount()).toBe(before + 1);
  });

  it('never moves a success TI back to scheduled', async () => {
    const { run, tis } = await newRun(dag('t2', [task('a')]));
    const a = tis.get('a')!;
    await forceTi(a.id, 'success');
    const before = await eventCount();
    expect(await transitionTis(db.sql, run.id, ['a'], 'scheduled')).toEqual([]);
    expect((await getTi(db.sql, a.id))!.state).toBe('success');
    expect(await eventCount()).toBe(before);
  });

  it('agrees with the state table for every (from, to) pair', async () => {
    // One task per state, so a single call per target tests every source state at once.
    const tasks = TI_STATES.map((s) => task(`t_${s}`));
    const { run, tis } = await newRun(dag('t3', tasks));
    for (const to of TI_STATES) {
      for (const from of TI_STATES) await forceTi(tis.get(`t_${from}`)!.id, from);
      await db.sql`delete from events`;
      const moved = await transitionTis(
        db.sql,
        run.id,
        tasks.map((t) => t.id),
        to,
      );
      const expected = TI_STATES.filter((from) => canTransitionTi(from, to)).map((from) => tis.get(`t_${from}`)!.id);
      expect([...moved].sort(), `→ ${to}`).toEqual([...expected].sort());
      const rows = await listTis(db.sql, run.id);
      for (const row of rows) {
        const from = row.task_id.slice(2) as TiState;
        expect(row.state, `${from} → ${to}`).toBe(canTransitionTi(from, to) ? to : from);
      }
      const evs = await db.sql<{ ti_id: string; payload: { to: string } }[]>`select ti_id, payload from events`;
      expect(evs.map((e) => e.ti_id).sort(), `events for → ${to}`).toEqual([...expected].sort());
      for (const e of evs) expect(e.payload.to).toBe(to);
    }
  });

  it('moves only the named tasks of the named run, and records ended_at and error when asked', async () => {
    const spec = dag('t4', [task('a'), task('b'), task('c')]);
    const r1 = await newRun(spec);
    const r2 = await newRun(spec);
    const moved = await transitionTis(db.sql, r1.run.id, ['a', 'b'], 'upstream_failed', {
      endedNow: true,
      error: 'upstream a failed',
    });
    expect(moved.sort()).toEqual([r1.tis.get('a')!.id, r1.tis.get('b')!.id].sort());
    const a = (await getTi(db.sql, r1.tis.get('a')!.id))!;
    expect(a.state).toBe('upstream_failed');
    expect(a.ended_at).toBeInstanceOf(Date);
    expect(a.error).toBe('upstream a failed');
    expect((await getTi(db.sql, r1.tis.get('c')!.id))!.state).toBe('none');
    for (const ti of await listTis(db.sql, r2.run.id)) expect(ti.state).toBe('none');
    // Without endedNow, ended_at is left alone.
    await transitionTis(db.sql, r1.run.id, ['c'], 'scheduled');
    expect((await getTi(db.sql, r1.tis.get('c')!.id))!.ended_at).toBeNull();
    expect(await transitionTis(db.sql, r1.run.id, [], 'scheduled')).toEqual([]);
  });
});

describe('transitionRun', () => {
  it('starts a queued run once, with one event', async () => {
    const { run } = await newRun(dag('r1', [task('a')]));
    expect(run.state).toBe('queued');
    await db.sql`delete from events`;
    expect(await transitionRun(db.sql, run.id, 'running')).toBe(true);
    const row = (await getRun(db.sql, run.id))!;
    expect(row.state).toBe('running');
    expect(row.started_at).toBeInstanceOf(Date);
    expect(row.ended_at).toBeNull();
    expect(await transitionRun(db.sql, run.id, 'running')).toBe(false);
    expect(await events({ runId: run.id })).toEqual([{ kind: 'run.state', payload: { to: 'running' } }]);
  });

  it('agrees with the state table for every (from, to) pair', async () => {
    const { run } = await newRun(dag('r2', [task('a')]));
    for (const from of RUN_STATES) {
      for (const to of RUN_STATES) {
        await forceRun(run.id, from);
        await db.sql`delete from events`;
        // The generic write never re-opens an ended run (only a clear does, see clear-cancel-ti).
        const legal = canTransitionRun(from, to) && !isTerminalRun(from);
        expect(await transitionRun(db.sql, run.id, to, { reason: 'test' }), `${from} → ${to}`).toBe(legal);
        const row = (await getRun(db.sql, run.id))!;
        expect(row.state).toBe(legal ? to : from);
        const evs = await events({ runId: run.id });
        expect(evs).toEqual(legal ? [{ kind: 'run.state', payload: { reason: 'test', to } }] : []);
        if (legal && (to === 'success' || to === 'failed' || to === 'cancelled'))
          expect(row.ended_at).toBeInstanceOf(Date);
      }
    }
  });
});

describe('claimAttempt', () => {
  it('claims a scheduled TI: try + 1, a new token, the deterministic dispatch key, one event', async () => {
    const { run, tis } = await newRun(dag('c1', [task('extract')]));
    await transitionRun(db.sql, run.id, 'running');
    const ti = tis.get('extract')!;
    await transitionTis(db.sql, run.id, ['extract'], 'scheduled');
    await db.sql`delete from events`;

    const claim = (await claimAttempt(db.sql, ti.id, 'subprocess'))!;
    expect(claim.tryNumber).toBe(1);
    expect(claim.maxTries).toBe(1);
    expect(claim.attemptToken).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/);
    expect(claim.dispatchKey).toBe(`c1-${run.id}-extract-1`);
    const row = (await getTi(db.sql, ti.id))!;
    expect(row).toMatchObject({
      state: 'queued',
      try_number: 1,
      attempt_token: claim.attemptToken,
      dispatch_key: claim.dispatchKey,
      executor: 'subprocess',
    });
    expect(row.queued_at).toBeInstanceOf(Date);
    expect(await events({ tiId: ti.id })).toEqual([
      { kind: 'ti.state', payload: { task_id: 'extract', to: 'queued', try: 1, agent_id: null } },
    ]);

    // No longer scheduled: a second claim does nothing.
    expect(await claimAttempt(db.sql, ti.id, 'subprocess')).toBeNull();
    expect((await getTi(db.sql, ti.id))!.try_number).toBe(1);
    expect(await events({ tiId: ti.id })).toHaveLength(1);
  });

  it('lets exactly one of two concurrent claims win', async () => {
    const { run, tis } = await newRun(dag('c2', [task('a'), task('b'), task('c')]));
    await transitionRun(db.sql, run.id, 'running');
    await transitionTis(db.sql, run.id, ['a', 'b', 'c'], 'scheduled');
    for (const taskId of ['a', 'b', 'c']) {
      const ti = tis.get(taskId)!;
      const claims = await Promise.all([
        claimAttempt(db.sql, ti.id, 'subprocess'),
        claimAttempt(db.sql, ti.id, 'subprocess'),
      ]);
      const won = claims.filter((c) => c !== null);
      expect(won, taskId).toHaveLength(1);
      const row = (await getTi(db.sql, ti.id))!;
      expect(row.try_number).toBe(1);
      expect(row.attempt_token).toBe(won[0]!.attemptToken);
      expect(await events({ tiId: ti.id })).toHaveLength(2); // scheduled, queued
    }
  });

  it('does not claim a TI whose run is not running, or that is not scheduled', async () => {
    const { run, tis } = await newRun(dag('c3', [task('a'), task('b')]));
    await transitionTis(db.sql, run.id, ['a'], 'scheduled');
    expect(await claimAttempt(db.sql, tis.get('a')!.id, 'subprocess')).toBeNull(); // run queued
    await transitionRun(db.sql, run.id, 'running');
    expect(await claimAttempt(db.sql, tis.get('b')!.id, 'subprocess')).toBeNull(); // TI none
    await transitionRun(db.sql, run.id, 'cancelled');
    expect(await claimAttempt(db.sql, tis.get('a')!.id, 'subprocess')).toBeNull(); // run cancelled
    expect((await getTi(db.sql, tis.get('a')!.id))!.state).toBe('scheduled');
  });

  it('records the signal that killed a try, on the row and in its end event, and a retry resets it', async () => {
    const { run, ti, claim } = await claimedTi(
      dag('c4s', [task('a', { retries: 1, retryDelayMs: 0, maxRetryDelayMs: 0 })]),
    );
    expect(await startAttempt(db.sql, { tiId: ti.id, ...claim }, { pid: 42, agentId: 'agent-1' })).toBe(true);
    const killed: AttemptResult = { exitCode: null, signal: 'SIGKILL', error: 'killed by SIGKILL', outcome: 'failed' };
    expect(await finishAttempt(db.sql, { tiId: ti.id, ...claim }, killed)).toBe('up_for_retry');
    expect((await getTi(db.sql, ti.id))!).toMatchObject({ exit_code: null, signal: 'SIGKILL' });
    const end = (await events({ tiId: ti.id })).at(-1)!;
    expect(end.payload).toMatchObject({ to: 'up_for_retry', signal: 'SIGKILL', exit_code: null });
    expect(await transitionTis(db.sql, run.id, ['a'], 'scheduled')).toEqual([ti.id]);
    expect(await claimAttempt(db.sql, ti.id, 'subprocess')).not.toBeNull();
    expect((await getTi(db.sql, ti.id))!.signal).toBeNull();
  });

  it('gives a retry a new try number, token and key, and resets the attempt fields', async () => {
    const { run, ti, claim } = await claimedTi(
      dag('c4', [task('a', { retries: 1, retryDelayMs: 0, maxRetryDelayMs: 0 })]),
    );
    expect(await startAttempt(db.sql, { tiId: ti.id, ...claim }, { pid: 42, agentId: 'agent-1' })).toBe(true);
    expect(await finishAttempt(db.sql, { tiId: ti.id, ...claim }, fail())).toBe('up_for_retry');
    expect(await transitionTis(db.sql, run.id, ['a'], 'scheduled')).toEqual([ti.id]);
    const again = (await claimAttempt(db.sql, ti.id, 'subprocess'))!;
    expect(again.tryNumber).toBe(2);
    expect(again.attemptToken).not.toBe(claim.attemptToken);
    expect(again.dispatchKey).toBe(`c4-${run.id}-a-2`);
    const row = (await getTi(db.sql, ti.id))!;
    expect(row).toMatchObject({
      state: 'queued',
      pid: null,
      agent_id: null,
      exit_code: null,
      error: null,
      next_try_at: null,
      started_at: null,
      ended_at: null,
      heartbeat_at: null,
    });
  });
});

describe('attempt reports are fenced', () => {
  it('startAttempt: a wrong token or try number changes nothing', async () => {
    const { ti, claim } = await claimedTi(dag('f1', [task('a')]));
    const wrongToken = {
      tiId: ti.id,
      tryNumber: claim.tryNumber,
      attemptToken: '00000000-0000-4000-8000-000000000000',
    };
    const wrongTry = { tiId: ti.id, tryNumber: claim.tryNumber + 1, attemptToken: claim.attemptToken };
    const before = await eventCount();
    expect(await startAttempt(db.sql, wrongToken, { pid: 1, agentId: null })).toBe(false);
    expect(await startAttempt(db.sql, wrongTry, { pid: 1, agentId: null })).toBe(false);
    expect((await getTi(db.sql, ti.id))!).toMatchObject({ state: 'queued', pid: null, started_at: null });
    expect(await eventCount()).toBe(before);

    const right = { tiId: ti.id, ...claim };
    expect(await startAttempt(db.sql, right, { pid: 4242, agentId: 'agent-7' })).toBe(true);
    const row = (await getTi(db.sql, ti.id))!;
    expect(row).toMatchObject({ state: 'running', pid: 4242, agent_id: 'agent-7' });
    expect(row.started_at).toBeInstanceOf(Date);
    expect(row.heartbeat_at).toBeInstanceOf(Date);
    expect(await eventCount()).toBe(before + 1);
    // A duplicate start report is refused (no longer queued).
    expect(await startAttempt(db.sql, right, { pid: 1, agentId: null })).toBe(false);
    expect((await getTi(db.sql, ti.id))!.pid).toBe(4242);
  });

  it('flushHeartbeats: only the current, live attempt is refreshed', async () => {
    const { ti, claim } = await claimedTi(dag('f2', [task('a')]));
    const right = { tiId: ti.id, attemptToken: claim.attemptToken };
    // Queued, not yet started, is current too: an agent lists an attempt it was just given
    // before its Started report lands, and must not be told to stop it.
    expect(await flushHeartbeats(db.sql, [right])).toEqual(new Set([ti.id]));
    await startAttempt(db.sql, { tiId: ti.id, ...claim }, { pid: 1, agentId: null });
    await db.sql`update task_instances set heartbeat_at = now() - interval '1 hour' where id = ${ti.id}`;
    const stale = (await getTi(db.sql, ti.id))!.heartbeat_at!;

    expect(
      await flushHeartbeats(db.sql, [{ tiId: ti.id, attemptToken: '00000000-0000-4000-8000-000000000000' }]),
    ).toEqual(new Set());
    expect((await getTi(db.sql, ti.id))!.heartbeat_at).toEqual(stale);

    expect(await flushHeartbeats(db.sql, [right, { tiId: '999999999', attemptToken: claim.attemptToken }])).toEqual(
      new Set([ti.id]),
    );
    expect((await getTi(db.sql, ti.id))!.heartbeat_at!.getTime()).toBeGreaterThan(stale.getTime() + 3_000_000);
    expect(await flushHeartbeats(db.sql, [])).toEqual(new Set());
  });

  it('finishAttempt: a wrong token, try number or a superseded outcome is rejected and changes nothing', async () => {
    const { ti, claim } = await claimedTi(dag('f3', [task('a')]));
    await startAttempt(db.sql, { tiId: ti.id, ...claim }, { pid: 1, agentId: null });
    const before = await eventCount();
    const snapshot = await getTi(db.sql, ti.id);
    expect(
      await finishAttempt(
        db.sql,
        { tiId: ti.id, tryNumber: claim.tryNumber, attemptToken: '00000000-0000-4000-8000-000000000000' },
        ok,
      ),
    ).toBe('rejected');
    expect(
      await finishAttempt(
        db.sql,
        { tiId: ti.id, tryNumber: claim.tryNumber - 1, attemptToken: claim.attemptToken },
        ok,
      ),
    ).toBe('rejected');
    expect(
      await finishAttempt(
        db.sql,
        { tiId: ti.id, tryNumber: claim.tryNumber + 1, attemptToken: claim.attemptToken },
        fail(),
      ),
    ).toBe('rejected');
    expect(
      await finishAttempt(
        db.sql,
        { tiId: ti.id, ...claim },
        { exitCode: null, signal: 'SIGKILL', error: 'superseded', outcome: 'superseded' },
      ),
    ).toBe('rejected');
    expect(await getTi(db.sql, ti.id)).toEqual(snapshot);
    expect(await eventCount()).toBe(before);

    expect(await finishAttempt(db.sql, { tiId: ti.id, ...claim }, ok)).toBe('success');
    const row = (await getTi(db.sql, ti.id))!;
    expect(row).toMatchObject({ state: 'success', exit_code: 0, error: null, pid: null });
    expect(row.ended_at).toBeInstanceOf(Date);
    expect(await eventCount()).toBe(before + 1);
    // The same report again: the attempt is over.
    expect(await finishAttempt(db.sql, { tiId: ti.id, ...claim }, fail())).toBe('rejected');
    expect((await getTi(db.sql, ti.id))!.state).toBe('success');
  });

  it('a failed attempt with tries left waits retry_delay · 2^(try−1), capped; the last try fails', async () => {
    const spec = dag('f4', [task('a', { retries: 3, retryDelayMs: 10_000, maxRetryDelayMs: 25_000 })]);
    const { run, ti, claim: first } = await claimedTi(spec);
    let claim = first;
    const expected = [10_000, 20_000, 25_000];
    for (let i = 0; i < 3; i++) {
      expect(claim.tryNumber).toBe(i + 1);
      expect(claim.maxTries).toBe(4);
      await startAttempt(db.sql, { tiId: ti.id, ...claim }, { pid: 1, agentId: null });
      expect(await finishAttempt(db.sql, { tiId: ti.id, ...claim }, fail(`exit code ${i + 1}`))).toBe('up_for_retry');
      const [row] = await db.sql<{ state: string; delay_ms: number; error: string; exit_code: number }[]>`
        select state, (extract(epoch from next_try_at - ended_at) * 1000)::float8 as delay_ms, error, exit_code
        from task_instances where id = ${ti.id}`;
      expect(row).toEqual({ state: 'up_for_retry', delay_ms: expected[i], error: `exit code ${i + 1}`, exit_code: 1 });
      expect(row!.delay_ms).toBe(retryDelayMs(spec.tasks[0]!, claim.tryNumber));
      // next_try_at ≈ now + delay, against the database clock
      const [drift] = await db.sql<{ ms: number }[]>`
        select abs(extract(epoch from next_try_at - now()) * 1000 - ${expected[i]!}::float8)::float8 as ms from task_instances where id = ${ti.id}`;
      expect(drift!.ms).toBeLessThan(5000);
      expect(await transitionTis(db.sql, run.id, ['a'], 'scheduled')).toEqual([ti.id]);
      claim = (await claimAttempt(db.sql, ti.id, 'subprocess'))!;
    }
    expect(claim.tryNumber).toBe(4);
    await startAttempt(db.sql, { tiId: ti.id, ...claim }, { pid: 1, agentId: null });
    expect(await finishAttempt(db.sql, { tiId: ti.id, ...claim }, fail())).toBe('failed');
    expect((await getTi(db.sql, ti.id))!).toMatchObject({ state: 'failed', next_try_at: null, try_number: 4 });
  });

  it('an attempt that could not start (still queued) fails or goes up for retry', async () => {
    const { ti, claim } = await claimedTi(dag('f5', [task('a', { retries: 1, retryDelayMs: 0, maxRetryDelayMs: 0 })]));
    expect(
      await finishAttempt(
        db.sql,
        { tiId: ti.id, ...claim },
        { exitCode: null, signal: null, error: 'spawn ENOENT', outcome: 'spawn_failed' },
      ),
    ).toBe('up_for_retry');
    expect((await getTi(db.sql, ti.id))!).toMatchObject({
      state: 'up_for_retry',
      error: 'spawn ENOENT',
      exit_code: null,
    });
  });
});

describe('finalizeRuns', () => {
  /** Ends the run as the planner does: at the epoch it reads now. */
  async function finalize(runId: string, outcome: 'success' | 'failed'): Promise<boolean> {
    const read = (await getRun(db.sql, runId))!;
    return (await finalizeRuns(db.sql, [{ runId, epoch: read.plan_epoch, outcome }])).has(runId);
  }

  it('refuses while a TI is not terminal, then finalizes once', async () => {
    const { run, tis } = await newRun(dag('z1', [task('a'), task('b'), task('c')]));
    await transitionRun(db.sql, run.id, 'running');
    await forceTi(tis.get('a')!.id, 'success');
    await forceTi(tis.get('b')!.id, 'skipped');
    for (const live of ['none', 'scheduled', 'queued', 'running', 'up_for_retry'] as const) {
      await forceTi(tis.get('c')!.id, live);
      expect(await finalize(run.id, 'success'), live).toBe(false);
      expect((await getRun(db.sql, run.id))!.state).toBe('running');
    }
    await forceTi(tis.get('c')!.id, 'failed');
    await db.sql`delete from events`;
    expect(await finalize(run.id, 'failed')).toBe(true);
    const row = (await getRun(db.sql, run.id))!;
    expect(row.state).toBe('failed');
    expect(row.ended_at).toBeInstanceOf(Date);
    expect(row.settled_at).toBeInstanceOf(Date);
    expect(await events({ runId: run.id })).toEqual([{ kind: 'run.state', payload: { to: 'failed' } }]);
    expect(await finalize(run.id, 'success')).toBe(false);
    expect((await getRun(db.sql, run.id))!.state).toBe('failed');
    expect(await events({ runId: run.id })).toHaveLength(1);
  });

  it('does not finalize a run that is not running', async () => {
    const { run, tis } = await newRun(dag('z2', [task('a')]));
    await forceTi(tis.get('a')!.id, 'success');
    expect(await finalize(run.id, 'success')).toBe(false);
    expect((await getRun(db.sql, run.id))!.state).toBe('queued');
  });
});

describe('database CHECK constraints', () => {
  it('accepts every state of the table and rejects an unknown state string', async () => {
    const { run, tis } = await newRun(dag('k1', [task('a')]));
    const tiId = tis.get('a')!.id;
    for (const s of TI_STATES) await forceTi(tiId, s);
    for (const s of RUN_STATES) await forceRun(run.id, s);
    await expect(db.sql`update task_instances set state = 'bogus' where id = ${tiId}`).rejects.toMatchObject({
      code: '23514',
    });
    await expect(db.sql`update task_instances set state = 'SUCCESS' where id = ${tiId}`).rejects.toMatchObject({
      code: '23514',
    });
    await expect(db.sql`update dag_runs set state = 'none' where id = ${run.id}`).rejects.toMatchObject({
      code: '23514',
    });
    await expect(db.sql`update dag_runs set state = 'up_for_retry' where id = ${run.id}`).rejects.toMatchObject({
      code: '23514',
    });
    // The guarded writer, handed an unknown state by an untyped caller, writes nothing either.
    await forceTi(tiId, 'none');
    const before = await eventCount();
    await expect(transitionTis(db.sql, run.id, ['a'], 'bogus' as TiState)).rejects.toThrow();
    expect((await getTi(db.sql, tiId))!.state).toBe('none');
    expect(await eventCount()).toBe(before);
  });
});
