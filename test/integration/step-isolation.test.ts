import net from 'node:net';
import { describe, expect, it } from 'vitest';
import type { DagSpec } from '../../src/core/dag-spec.js';
import { claimAttempt } from '../../src/db/attempts/claim-attempt.js';
import { startAttempt } from '../../src/db/attempts/start-attempt.js';
import { getRun, type RunRow } from '../../src/db/runs.js';
import { createSql, type Sql } from '../../src/db/sql.js';
import { getTi, listTis, transitionTis } from '../../src/db/tis.js';
import { reapHeartbeats } from '../../src/scheduler/phases/reap-heartbeats.js';
import { step, type StepResult } from '../../src/scheduler/step.js';
import { databaseForFile } from '../helpers/test-database.js';
import { dag, task } from '../helpers/spec-builders.js';
import { schedulerHarness } from '../helpers/scheduler-harness.js';
import { attemptFixtures } from '../helpers/attempt-fixtures.js';

const BOUND = { timeout: 20_000 };
const HEARTBEAT_MS = 5_000;

const db = databaseForFile({ emptyEach: true });

const harness = (sql: Sql = db.sql) =>
  schedulerHarness(sql, { runOrphanThresholdMs: 60_000, heartbeatThresholdMs: HEARTBEAT_MS });

const fixtures = attemptFixtures(() => db.sql, 'subprocess');
const runningRun = async (spec: DagSpec): Promise<RunRow> => (await fixtures.runningRun(spec)).run;

/** A running run with one attempt whose heartbeat went stale: work for the heartbeat reaper. */
async function staleAttempt(): Promise<string> {
  const run = await runningRun(dag('iso_stale', [task('a')]));
  const [ti] = await listTis(db.sql, run.id);
  await transitionTis(db.sql, run.id, ['a'], 'scheduled');
  const c = (await claimAttempt(db.sql, ti!.id, 'subprocess'))!;
  expect(
    await startAttempt(
      db.sql,
      { tiId: ti!.id, tryNumber: c.tryNumber, attemptToken: c.attemptToken },
      { pid: 1, agentId: null },
    ),
  ).toBe(true);
  await db.sql`update task_instances set heartbeat_at = now() - interval '10 minutes' where id = ${ti!.id}`;
  return ti!.id;
}

/** A running run whose only TI ended long ago: work for the run reaper. */
async function orphanRun(): Promise<string> {
  const run = await runningRun(dag('iso_orphan', [task('a')]));
  await db.sql`update dag_runs set started_at = now() - interval '1 hour' where id = ${run.id}`;
  await db.sql`update task_instances set state = 'success', ended_at = now() - interval '30 minutes' where run_id = ${run.id}`;
  return run.id;
}

async function closedPort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as net.AddressInfo;
      srv.close(() => resolve(port));
    });
  });
}

describe('step isolation', () => {
  it('a failing plan phase does not stop the reapers, and makes the heartbeat reaper hold off', BOUND, async () => {
    const tiId = await staleAttempt();
    const runId = await orphanRun();
    const h = harness();
    const t0 = new Date();
    h.clock.now = t0;

    // Only the planner reads dag_runs.poison_error (it skips poisoned runs).
    await db.sql`alter table dag_runs rename column poison_error to poison_error_x`;
    let r: StepResult;
    try {
      r = await step(h.ctx);
    } finally {
      await db.sql`alter table dag_runs rename column poison_error_x to poison_error`;
    }

    expect(r.failedPhases).toEqual(['plan']);
    expect(r.plan).toBeNull();
    expect(h.errors.map((e) => e.phase)).toEqual(['plan']);
    for (const e of h.errors) expect((e.err as { code?: string }).code).toBe('42703');
    // The run reaper ran and did its work.
    expect(r.reapRuns).toEqual({ candidates: 1, finalized: 1, errors: 0 });
    expect((await getRun(db.sql, runId))!.state).toBe('success');
    // A bug in one phase (here a missing column) is not a database outage: the heartbeat
    // reaper is not put on hold, so a planner failing every tick cannot switch it off.
    expect(h.ctx.health.healthySince).toEqual(new Date(0));
    expect(r.reapHeartbeats).toMatchObject({ candidates: 1, failed: 1, heldOff: false });
    expect((await getTi(db.sql, tiId))!.state).toBe('failed');
    expect(h.errors).toHaveLength(1);
  });

  it('a step over an ended pool resolves with its phases failed instead of throwing', BOUND, async () => {
    const sql = createSql(db.url, { max: 1 });
    await sql`select 1`;
    await sql.end({ timeout: 1 });
    const h = harness(sql);
    const t0 = new Date();
    h.clock.now = t0;

    const r = await step(h.ctx);
    // The attempt reapers do not even query: the failures before them put them on hold-off.
    expect(r).toEqual({
      plan: null,
      reapRuns: null,
      reapHeartbeats: { candidates: 0, retried: 0, failed: 0, errors: 0, heldLive: 0, heldOff: true, runIds: [] },
      reapTimeouts: { candidates: 0, retried: 0, failed: 0, errors: 0, heldOff: true, runIds: [] },
      endDueWaits: { ended: 0, heldOff: true, runIds: [] },
      checkDeadlines: null,
      failedPhases: ['plan', 'reapRuns', 'checkDeadlines'],
    });
    expect(h.errors.map((e) => e.phase)).toEqual(['plan.cron', 'plan', 'reap-runs', 'check-deadlines']);
    expect(h.ctx.health.healthySince).toEqual(t0);

    // Called on its own (no hold-off), the heartbeat phase does query and throw: it is the step
    // that keeps such an error from escaping.
    h.ctx.health.healthySince = new Date(0);
    await expect(reapHeartbeats(h.ctx)).rejects.toThrow();
  });

  it('a step against a server that refuses connections resolves', BOUND, async () => {
    const u = new URL(db.url);
    u.port = String(await closedPort());
    const sql = createSql(u.toString(), { max: 1 });
    try {
      const h = harness(sql);
      const r = await step(h.ctx);
      expect(r.failedPhases).toEqual(['plan', 'reapRuns', 'checkDeadlines']);
      expect(r.plan).toBeNull();
      expect(r.reapRuns).toBeNull();
      expect(r.reapHeartbeats!.heldOff).toBe(true);
      expect(r.reapTimeouts!.heldOff).toBe(true);
      expect(r.endDueWaits!.heldOff).toBe(true);
      expect(h.errors.map((e) => e.phase)).toEqual(['plan.cron', 'plan', 'reap-runs', 'check-deadlines']);
    } finally {
      await sql.end({ timeout: 1 });
    }
  });
});
