/**
 * The planner's cron runs (catchup, no duplicates between two leaders) and paused DAGs.
 */
import { describe, expect, it } from 'vitest';
import { claimAttempt } from '../../src/db/attempts/claim-attempt.js';
import { finishAttempt } from '../../src/db/attempts/finish-attempt.js';
import { startAttempt } from '../../src/db/attempts/start-attempt.js';
import { getDag, upsertDag } from '../../src/db/dags.js';
import { createSql } from '../../src/db/sql.js';
import { listTis } from '../../src/db/tis.js';
import { createScheduledRuns } from '../../src/scheduler/phases/create-scheduled-runs.js';
import { databaseForFile } from '../helpers/test-database.js';
import { dag } from '../helpers/spec-builders.js';
import { BOUND, OK, planningFixtures, stepOk, task } from '../helpers/planning-fixtures.js';

// The planner looks at every active run of the database: start each test from an empty one.
const db = databaseForFile({ emptyEach: true });
const { harness, trigger, tiMap, states, runState } = planningFixtures(db);

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
