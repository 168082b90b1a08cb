import { readFile } from 'node:fs/promises';
import { describe, expect, it } from 'vitest';
import type { AttemptResult } from '../../src/core/attempt.js';
import { finishAttempt } from '../../src/db/attempts/finish-attempt.js';
import { flushHeartbeats } from '../../src/db/attempts/flush-heartbeats.js';
import { startAttempt } from '../../src/db/attempts/start-attempt.js';
import { overdueAttempts } from '../../src/db/reap/overdue-attempts.js';
import { timeOutAttempt } from '../../src/db/reap/time-out-attempt.js';
import { getTi, type TiRow } from '../../src/db/tis.js';
import { reapTimeouts } from '../../src/scheduler/phases/reap-timeouts.js';
import { step } from '../../src/scheduler/step.js';
import { attemptFixtures, type AttemptRef } from '../helpers/attempt-fixtures.js';
import { dag, task } from '../helpers/spec-builders.js';
import { schedulerHarness, type HarnessOptions } from '../helpers/scheduler-harness.js';
import { databaseForFile } from '../helpers/test-database.js';

/**
 * The leader's backstop for timeouts: a running attempt past its timeout plus the grace is ended
 * as timed out (retries apply) and cancelled at its holder, however its holder behaves; nothing
 * else is touched.
 */

const BOUND = { timeout: 20_000 };
const GRACE_MS = 15_000;

// The reaper looks at every attempt of the database: start each test from an empty one.
const db = databaseForFile({ emptyEach: true });

const harness = (over: HarnessOptions = {}) => schedulerHarness(db.sql, { timeoutGraceMs: GRACE_MS, ...over });

const { runningRun, claim } = attemptFixtures(() => db.sql, 'agents');

/** Claimed and started `agoMs` ago on agent-1, its heartbeat fresh. */
async function startedAgo(runId: string, ti: TiRow, agoMs: number): Promise<AttemptRef> {
  const a = await claim(runId, ti);
  expect(await startAttempt(db.sql, a, { pid: 4242, agentId: 'agent-1' })).toBe(true);
  await db.sql`update task_instances set queued_at = now() - ${agoMs + 1000} * interval '1 millisecond',
                 started_at = now() - ${agoMs} * interval '1 millisecond' where id = ${a.tiId}`;
  expect(await flushHeartbeats(db.sql, [a])).toEqual(new Set([a.tiId]));
  return a;
}

async function ti(tiId: string): Promise<TiRow & { timeout_ms: number | null }> {
  return (await getTi(db.sql, tiId)) as TiRow & { timeout_ms: number | null };
}

const OK: AttemptResult = { exitCode: 0, signal: null, error: null, outcome: 'success' };

/** A pass's result: nothing reaped but what `o` says. */
const reaped = (o: object) => ({ candidates: 0, retried: 0, failed: 0, errors: 0, heldOff: false, runIds: [], ...o });

describe('reapTimeouts', () => {
  it(
    'ends a running attempt past its timeout and the grace as timed out, with a retry, and cancels it at its holder',
    BOUND,
    async () => {
      const { run, tis } = await runningRun(
        dag('to_retry', [task('a', { timeoutMs: 1000, retries: 1, retryDelayMs: 60_000 })]),
      );
      expect((await ti(tis.get('a')!.id)).timeout_ms).toBe(1000);
      const a = await startedAgo(run.id, tis.get('a')!, 1000 + GRACE_MS + 500);
      const h = harness();

      expect(await reapTimeouts(h.ctx)).toEqual(reaped({ candidates: 1, retried: 1, runIds: [run.id] }));
      const row = await ti(a.tiId);
      // The holder's token dies with the attempt: whatever it reports later is refused.
      expect(row).toMatchObject({ state: 'up_for_retry', try_number: 1, attempt_token: null, pid: null });
      expect(row.error).toBe(
        `timed out after 1000 ms (ended by the control plane: still running ${GRACE_MS} ms past the timeout)`,
      );
      expect(row.next_try_at!.getTime()).toBeGreaterThan(Date.now() + 50_000);
      const [ev] = await db.sql<{ payload: Record<string, unknown> }[]>`
      select payload from events where ti_id = ${a.tiId} order by seq desc limit 1`;
      expect(ev!.payload).toMatchObject({
        task_id: 'a',
        to: 'up_for_retry',
        try: 1,
        reason: 'timed_out',
        error: row.error,
      });
      expect(h.cancelled).toEqual([{ tiId: a.tiId, reason: 'timed out after 1000 ms' }]);
      expect(h.reaped).toEqual([{ kind: 'ti', count: 1 }]);
      expect(h.timedOut).toEqual([1]);
      expect(h.agentLost).toEqual([]);
      expect(await finishAttempt(db.sql, a, OK)).toBe('rejected');

      // Once ended, it is no longer a candidate.
      expect(await reapTimeouts(h.ctx)).toMatchObject({ candidates: 0 });
      expect(h.cancelled).toHaveLength(1);
    },
  );

  it('fails it when no tries are left', BOUND, async () => {
    const { run, tis } = await runningRun(dag('to_fail', [task('a', { timeoutMs: 2000 })]));
    const a = await startedAgo(run.id, tis.get('a')!, 60_000);
    const h = harness();
    expect(await reapTimeouts(h.ctx)).toMatchObject({ candidates: 1, retried: 0, failed: 1 });
    expect(await ti(a.tiId)).toMatchObject({ state: 'failed', next_try_at: null, attempt_token: null });
  });

  it(
    'leaves alone an attempt within its timeout and the grace, one without a timeout, and one not started',
    BOUND,
    async () => {
      const { run, tis } = await runningRun(
        dag('to_alone', [task('within', { timeoutMs: 1000 }), task('none'), task('queued', { timeoutMs: 1 })]),
      );
      const within = await startedAgo(run.id, tis.get('within')!, 1000 + GRACE_MS - 2000);
      const none = await startedAgo(run.id, tis.get('none')!, 24 * 3600_000);
      const queued = await claim(run.id, tis.get('queued')!);
      await db.sql`update task_instances set queued_at = now() - interval '1 hour' where id = ${queued.tiId}`;
      const before = await Promise.all([within, none, queued].map((a) => ti(a.tiId)));
      const h = harness();

      expect(await reapTimeouts(h.ctx)).toEqual(reaped({}));
      expect(await Promise.all([within, none, queued].map((a) => ti(a.tiId)))).toEqual(before);
      expect(h.cancelled).toEqual([]);
    },
  );

  it('leaves an end the holder reported between the read and the write, and cancels nothing', BOUND, async () => {
    const { run, tis } = await runningRun(dag('to_race', [task('a', { timeoutMs: 1000, retries: 2 })]));
    const a = await startedAgo(run.id, tis.get('a')!, 60_000);
    const [candidate] = await overdueAttempts(db.sql, GRACE_MS, 100);
    expect(candidate).toMatchObject({ id: a.tiId, try_number: 1, attempt_token: a.attemptToken, timeout_ms: 1000 });

    const timedOut: AttemptResult = {
      exitCode: null,
      signal: 'SIGKILL',
      error: 'timed out after 1000 ms',
      outcome: 'timed_out',
    };
    expect(await finishAttempt(db.sql, a, timedOut)).toBe('up_for_retry');
    const before = await ti(a.tiId);
    expect(await timeOutAttempt(db.sql, candidate!, GRACE_MS)).toBe('skipped');
    expect(await ti(a.tiId)).toEqual(before);
    expect(before.error).toBe('timed out after 1000 ms');
  });

  it('never ends a newer attempt through a stale candidate row of a superseded one', BOUND, async () => {
    const { run, tis } = await runningRun(dag('to_fence', [task('a', { timeoutMs: 1000, retries: 2 })]));
    const first = await startedAgo(run.id, tis.get('a')!, 60_000);
    const [candidate] = await overdueAttempts(db.sql, GRACE_MS, 100);
    await finishAttempt(db.sql, first, { exitCode: 1, signal: null, error: 'exit code 1', outcome: 'failed' });
    // Try 2, itself overdue by now: only the fence protects it from the old candidate row.
    const second = await startedAgo(run.id, await ti(first.tiId), 60_000);
    const before = await ti(second.tiId);
    expect(await timeOutAttempt(db.sql, candidate!, GRACE_MS)).toBe('skipped');
    expect(await ti(second.tiId)).toEqual(before);
  });

  it('holds off for a whole heartbeat threshold after the database was last unreachable', BOUND, async () => {
    const { run, tis } = await runningRun(dag('to_holdoff', [task('a', { timeoutMs: 1000 })]));
    const a = await startedAgo(run.id, tis.get('a')!, 60_000);
    const since = new Date();
    const h = harness({ health: { healthySince: since }, heartbeatThresholdMs: 5000 });
    h.clock.now = new Date(since.getTime() + 4999);
    expect(await reapTimeouts(h.ctx)).toEqual(reaped({ heldOff: true }));
    expect((await ti(a.tiId)).state).toBe('running');
    h.clock.now = new Date(since.getTime() + 5000);
    expect(await reapTimeouts(h.ctx)).toMatchObject({ failed: 1, heldOff: false });
  });

  it('runs in every full step', BOUND, async () => {
    const { run, tis } = await runningRun(dag('to_step', [task('a', { timeoutMs: 1000 })]));
    const a = await startedAgo(run.id, tis.get('a')!, 60_000);
    const h = harness();
    const s = await step(h.ctx);
    expect(s.failedPhases).toEqual([]);
    expect(s.reapTimeouts).toMatchObject({ candidates: 1, failed: 1 });
    expect(h.cancelled.map((c) => c.tiId)).toEqual([a.tiId]);
    expect((await step(h.ctx, 'light')).reapTimeouts).toBeNull();
  });
});

describe('migration 007', () => {
  it('gives task instances that may still run the timeout of their run spec', BOUND, async () => {
    const { run, tis } = await runningRun(
      dag('to_migrate', [task('a', { timeoutMs: 3000 }), task('b'), task('done', { timeoutMs: 4000 })]),
    );
    await db.sql`update task_instances set state = 'success' where id = ${tis.get('done')!.id}`;
    await db.sql`update task_instances set timeout_ms = null where run_id = ${run.id}`;
    const text = await readFile(new URL('../../src/db/migrations/007_task_timeout.sql', import.meta.url), 'utf8');
    // The backfill alone (the column exists already).
    const backfill = text.slice(text.indexOf('update task_instances'));
    const rows = await db.sql.begin(async (tx) => {
      // As 007 found it: each run holding its spec (009 moved it to dag_versions).
      await tx`alter table dag_runs add column spec jsonb`;
      await tx`update dag_runs r set spec = v.spec from dag_versions v where v.dag_id = r.dag_id and v.version = r.dag_version`;
      await tx.unsafe(backfill);
      const read = await tx<{ task_id: string; timeout_ms: number | null }[]>`
        select task_id, timeout_ms from task_instances where run_id = ${run.id} order by task_id`;
      await tx`alter table dag_runs drop column spec`;
      return read;
    });
    expect(rows).toEqual([
      { task_id: 'a', timeout_ms: 3000 },
      { task_id: 'b', timeout_ms: null },
      { task_id: 'done', timeout_ms: null },
    ]);
  });
});
