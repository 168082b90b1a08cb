/**
 * The planner's multi-row writes (issue #5): its moves for many runs in one statement, guarded per
 * run by the plan epoch and per TI by the state read; pending reasons and run ends in batches. Each
 * test counts the statements it causes.
 */
import { describe, expect, it } from 'vitest';
import type { DagSpec } from '../../src/core/dag-spec.js';
import { PLANS_PER_STATEMENT, applyPlans } from '../../src/db/plan/apply-plans.js';
import { finalizeRuns } from '../../src/db/plan/finalize-runs.js';
import { claimAttempts } from '../../src/db/attempts/claim-attempt.js';
import { clearTaskInstance } from '../../src/db/clear-task-instance.js';
import { getRun, type RunRow } from '../../src/db/runs.js';
import { listTis, setPendingReasons, type TiRow } from '../../src/db/tis.js';
import { dag, task } from '../helpers/spec-builders.js';
import { countingStatements } from '../helpers/watching-sql.js';
import { databaseForFile } from '../helpers/test-database.js';
import { attemptFixtures } from '../helpers/attempt-fixtures.js';

const db = databaseForFile({ emptyEach: true });

const fixtures = attemptFixtures(() => db.sql, 'subprocess');
const newRun = (spec: DagSpec) => fixtures.queuedRun(spec, { logicalDate: new Date() });

const chain = (id: string) => dag(id, [task('a'), task('b', { dependsOn: ['a'] })]);

async function states(runId: string): Promise<Record<string, string>> {
  return Object.fromEntries((await listTis(db.sql, runId)).map((t) => [t.task_id, t.state]));
}

/** The plan that starts a run and schedules its task `a`. */
function startWithA({ run, tis }: { run: RunRow; tis: Map<string, TiRow> }) {
  return {
    runId: run.id,
    epoch: run.plan_epoch,
    start: true,
    moves: [{ tiId: tis.get('a')!.id, from: 'none' as const, to: 'scheduled' as const }],
  };
}

describe('applyPlans', () => {
  it('starts runs and moves task instances of many runs in one statement, each move in the events log', async () => {
    const runs = await Promise.all([newRun(chain('p1')), newRun(chain('p2')), newRun(chain('p3'))]);
    const c = countingStatements(db.sql);
    const applied = await applyPlans(c.sql, runs.map(startWithA));
    expect(c.count()).toBe(1);
    expect([...applied.started].sort()).toEqual(runs.map((r) => r.run.id).sort());
    expect(applied.moved.size).toBe(3);
    for (const { run, tis } of runs) {
      expect((await getRun(db.sql, run.id))!.state).toBe('running');
      expect(await states(run.id)).toEqual({ a: 'scheduled', b: 'none' });
      const ev = await db.sql<
        { kind: string; to: string }[]
      >`select kind, payload->>'to' as to from events where run_id = ${run.id} order by seq`;
      expect(ev.map((e) => `${e.kind}:${e.to}`)).toEqual([
        'run.state:queued',
        'run.state:running',
        'ti.state:scheduled',
      ]);
      expect((await listTis(db.sql, run.id)).find((t) => t.id === tis.get('a')!.id)!.pending_reason).toBeNull();
    }
  });

  it('drops the plan of a run cleared since the read, and applies the others', async () => {
    const one = await newRun(chain('c1'));
    const two = await newRun(chain('c2'));
    for (const r of [one, two]) {
      await db.sql`update dag_runs set state = 'running' where id = ${r.run.id}`;
      await db.sql`update task_instances set state = 'failed', ended_at = now() where id = ${r.tis.get('a')!.id}`;
    }
    // Both runs read now: a failed, so b is upstream_failed.
    const read = await Promise.all([one, two].map(async (r) => (await getRun(db.sql, r.run.id))!));
    // Meanwhile an operator clears a of run one: a is none again, and the epoch moves on.
    expect((await clearTaskInstance(db.sql, { runId: one.run.id, taskId: 'a', downstream: true })).kind).toBe(
      'cleared',
    );
    const applied = await applyPlans(
      db.sql,
      [one, two].map((r, i) => ({
        runId: r.run.id,
        epoch: read[i]!.plan_epoch,
        start: false,
        moves: [{ tiId: r.tis.get('b')!.id, from: 'none' as const, to: 'upstream_failed' as const }],
      })),
    );
    expect([...applied.runs]).toEqual([two.run.id]);
    expect(await states(one.run.id)).toEqual({ a: 'none', b: 'none' });
    expect(await states(two.run.id)).toEqual({ a: 'failed', b: 'upstream_failed' });
  });

  it('leaves a task instance alone when another writer moved it since the read', async () => {
    const { run, tis } = await newRun(chain('m1'));
    await db.sql`update dag_runs set state = 'running' where id = ${run.id}`;
    const read = (await getRun(db.sql, run.id))!;
    // Another leader scheduled and claimed a first.
    await db.sql`update task_instances set state = 'scheduled' where id = ${tis.get('a')!.id}`;
    expect((await claimAttempts(db.sql, 'subprocess', [{ tiId: tis.get('a')!.id, agentId: null }])).size).toBe(1);
    const applied = await applyPlans(db.sql, [
      {
        runId: run.id,
        epoch: read.plan_epoch,
        start: false,
        moves: [{ tiId: tis.get('a')!.id, from: 'none', to: 'scheduled' }],
      },
    ]);
    expect(applied.runs.has(run.id)).toBe(true);
    expect(applied.moved.size).toBe(0);
    expect(await states(run.id)).toEqual({ a: 'queued', b: 'none' });
  });

  it('claims a task instance with its move when asked: scheduled then queued, try 1, in the same statement', async () => {
    const { run, tis } = await newRun(chain('k1'));
    const other = await newRun(chain('k2'));
    // Another writer scheduled k2's a first: its claim with the move does not happen.
    await db.sql`update dag_runs set state = 'running' where id = ${other.run.id}`;
    await db.sql`update task_instances set state = 'scheduled' where id = ${other.tis.get('a')!.id}`;
    const c = countingStatements(db.sql);
    const applied = await applyPlans(c.sql, [
      {
        runId: run.id,
        epoch: run.plan_epoch,
        start: true,
        moves: [{ tiId: tis.get('a')!.id, from: 'none', to: 'scheduled', claimFor: 'subprocess' }],
      },
      {
        runId: other.run.id,
        epoch: other.run.plan_epoch,
        start: false,
        moves: [{ tiId: other.tis.get('a')!.id, from: 'none', to: 'scheduled', claimFor: 'subprocess' }],
      },
    ]);
    expect(c.count()).toBe(1);
    expect([...applied.claims.keys()]).toEqual([tis.get('a')!.id]);
    const claim = applied.claims.get(tis.get('a')!.id)!;
    expect(claim.tryNumber).toBe(1);
    expect(claim.dispatchKey).toBe(`k1-${run.id}-a-1`);
    const [row] = await db.sql<{ state: string; try_number: number; attempt_token: string; queued_at: Date | null }[]>`
      select state, try_number, attempt_token, queued_at from task_instances where id = ${tis.get('a')!.id}`;
    expect(row).toMatchObject({ state: 'queued', try_number: 1, attempt_token: claim.attemptToken });
    expect(row!.queued_at).not.toBeNull();
    const ev = await db.sql<
      { to: string; try: number }[]
    >`select payload->>'to' as to, (payload->>'try')::int as try from events where ti_id = ${tis.get('a')!.id} order by seq`;
    expect(ev).toEqual([
      { to: 'scheduled', try: 0 },
      { to: 'queued', try: 1 },
    ]);
    expect(await states(other.run.id)).toEqual({ a: 'scheduled', b: 'none' });
    await expect(
      applyPlans(db.sql, [
        {
          runId: run.id,
          epoch: run.plan_epoch,
          start: false,
          moves: [{ tiId: tis.get('b')!.id, from: 'none', to: 'skipped', claimFor: 'subprocess' }],
        },
      ]),
    ).rejects.toThrow(
      `illegal planner claim of task instance ${tis.get('b')!.id}: only a move to scheduled can be claimed`,
    );
  });

  it('starts no more runs of a DAG than its max_active_runs leaves room for at the write, whatever the planner was told', async () => {
    const spec = { ...dag('p_max', [task('a')]), maxActiveRuns: 2 };
    const [one, two, three] = [await newRun(spec), await newRun(spec), await newRun(spec)];
    await db.sql`update dag_runs set state = 'running' where id = ${one.run.id}`;
    // Told (from an old count) that nothing runs: two and three would both start.
    const start = (r: { run: RunRow }) => ({ runId: r.run.id, epoch: r.run.plan_epoch, start: true, moves: [] });
    const applied = await applyPlans(db.sql, [start(two), start(three)]);
    expect([...applied.started]).toEqual([two.run.id]);
    expect((await getRun(db.sql, three.run.id))!.state).toBe('queued');
  });

  it('applies more plans than one statement takes a statement at a time: max_active_runs holds across them', async () => {
    const spec = { ...dag('p_many', [task('a')]), maxActiveRuns: PLANS_PER_STATEMENT + 50 };
    const runs: { run: RunRow; tis: Map<string, TiRow> }[] = [];
    for (let i = 0; i < PLANS_PER_STATEMENT * 2 + 50; i++) runs.push(await newRun(spec));
    const c = countingStatements(db.sql);
    const applied = await applyPlans(c.sql, runs.map(startWithA));
    expect(c.count()).toBe(3);
    const fit = runs.slice(0, spec.maxActiveRuns);
    expect([...applied.started].sort()).toEqual(fit.map((r) => r.run.id).sort());
    expect([...applied.moved].sort()).toEqual(fit.map((r) => r.tis.get('a')!.id).sort());
    const [n] = await db.sql<{ running: number; scheduled: number }[]>`
      select (select count(*)::int from dag_runs where dag_id = 'p_many' and state = 'running') as running,
             (select count(*)::int from task_instances t join dag_runs r on r.id = t.run_id where r.dag_id = 'p_many' and t.state = 'scheduled') as scheduled`;
    expect(n).toEqual({ running: spec.maxActiveRuns, scheduled: spec.maxActiveRuns });
  });

  it('sends only the parts a batch needs: a plan that only keeps its run, one that only moves, one that only claims', async () => {
    const [keep, move, claim] = [await newRun(chain('o1')), await newRun(chain('o2')), await newRun(chain('o3'))];
    for (const r of [keep, move, claim]) await db.sql`update dag_runs set state = 'running' where id = ${r.run.id}`;
    const kept = await applyPlans(db.sql, [
      { runId: keep.run.id, epoch: keep.run.plan_epoch, start: false, moves: [] },
    ]);
    expect([...kept.runs]).toEqual([keep.run.id]);
    expect(kept.moved.size + kept.started.size + kept.claims.size).toBe(0);
    const moved = await applyPlans(db.sql, [
      {
        runId: move.run.id,
        epoch: move.run.plan_epoch,
        start: false,
        moves: [{ tiId: move.tis.get('a')!.id, from: 'none', to: 'scheduled' }],
      },
    ]);
    expect([...moved.moved]).toEqual([move.tis.get('a')!.id]);
    expect(moved.claims.size).toBe(0);
    const claimed = await applyPlans(db.sql, [
      {
        runId: claim.run.id,
        epoch: claim.run.plan_epoch,
        start: false,
        moves: [{ tiId: claim.tis.get('a')!.id, from: 'none', to: 'scheduled', claimFor: 'subprocess' }],
      },
    ]);
    expect([...claimed.claims.keys()]).toEqual([claim.tis.get('a')!.id]);
    expect(await states(keep.run.id)).toEqual({ a: 'none', b: 'none' });
    expect(await states(move.run.id)).toEqual({ a: 'scheduled', b: 'none' });
    expect(await states(claim.run.id)).toEqual({ a: 'queued', b: 'none' });
    const ev = await db.sql<{ run_id: string; to: string }[]>`
      select run_id, payload->>'to' as to from events where run_id in (${keep.run.id}, ${move.run.id}, ${claim.run.id}) and kind = 'ti.state' order by seq`;
    expect(ev.map((e) => [e.run_id, e.to])).toEqual([
      [move.run.id, 'scheduled'],
      [claim.run.id, 'scheduled'],
      [claim.run.id, 'queued'],
    ]);
  });

  it('starts a run, moves one task instance and claims another in one statement', async () => {
    const { run, tis } = await newRun(dag('all_parts', [task('a'), task('b')]));
    const c = countingStatements(db.sql);
    const applied = await applyPlans(c.sql, [
      {
        runId: run.id,
        epoch: run.plan_epoch,
        start: true,
        moves: [
          { tiId: tis.get('a')!.id, from: 'none', to: 'scheduled' },
          { tiId: tis.get('b')!.id, from: 'none', to: 'scheduled', claimFor: 'subprocess' },
        ],
      },
    ]);
    expect(c.count()).toBe(1);
    expect([...applied.started]).toEqual([run.id]);
    expect([...applied.claims.keys()]).toEqual([tis.get('b')!.id]);
    expect(await states(run.id)).toEqual({ a: 'scheduled', b: 'queued' });
  });

  it('refuses a move the state table forbids, naming it', async () => {
    const { run, tis } = await newRun(chain('x1'));
    await expect(
      applyPlans(db.sql, [
        {
          runId: run.id,
          epoch: '0',
          start: false,
          moves: [{ tiId: tis.get('a')!.id, from: 'success', to: 'scheduled' }],
        },
      ]),
    ).rejects.toThrow(`illegal planner move success → scheduled for task instance ${tis.get('a')!.id}`);
  });
});

describe('setPendingReasons', () => {
  it('skips a row another writer holds instead of waiting for it, and writes the others', async () => {
    const { tis } = await newRun(chain('pr1'));
    const [a, b] = [tis.get('a')!.id, tis.get('b')!.id];
    const reserved = await db.sql.reserve();
    try {
      await reserved`begin`;
      await reserved`select 1 from task_instances where id = ${a} for update`;
      // Waiting for the lock would hang here until the transaction ends (and two such writes
      // over the same rows in opposite orders could deadlock).
      await setPendingReasons(
        db.sql,
        new Map([
          [a, 'DAG_PAUSED'],
          [b, 'DAG_PAUSED'],
        ]),
      );
      await reserved`commit`;
    } finally {
      reserved.release();
    }
    const reasons = async () =>
      Object.fromEntries(
        (
          await db.sql<
            { id: string; reason: string | null }[]
          >`select id, pending_reason as reason from task_instances where id in (${a}, ${b})`
        ).map((r) => [r.id, r.reason]),
      );
    expect(await reasons()).toEqual({ [a]: 'RUN_QUEUED', [b]: 'DAG_PAUSED' });
    // The next step's write, with the row free again, lands.
    await setPendingReasons(db.sql, new Map([[a, 'DAG_PAUSED']]));
    expect(await reasons()).toEqual({ [a]: 'DAG_PAUSED', [b]: 'DAG_PAUSED' });
  });
});

describe('finalizeRuns', () => {
  it('ends every run whose task instances are all terminal, in one statement, and no other', async () => {
    const done = await newRun(chain('f1'));
    const busy = await newRun(chain('f2'));
    const cleared = await newRun(chain('f3'));
    for (const r of [done, busy, cleared]) {
      await db.sql`update dag_runs set state = 'running' where id = ${r.run.id}`;
      await db.sql`update task_instances set state = 'success', ended_at = now() where run_id = ${r.run.id}`;
    }
    await db.sql`update task_instances set state = 'running' where id = ${busy.tis.get('b')!.id}`;
    const read = await Promise.all([done, busy, cleared].map(async (r) => (await getRun(db.sql, r.run.id))!));
    await clearTaskInstance(db.sql, { runId: cleared.run.id, taskId: 'b', downstream: false });
    const c = countingStatements(db.sql);
    const ended = await finalizeRuns(
      c.sql,
      read.map((r) => ({ runId: r.id, epoch: r.plan_epoch, outcome: 'success' as const })),
    );
    expect(c.count()).toBe(1);
    expect([...ended]).toEqual([done.run.id]);
    expect((await getRun(db.sql, done.run.id))!.state).toBe('success');
    expect((await getRun(db.sql, busy.run.id))!.state).toBe('running');
    expect((await getRun(db.sql, cleared.run.id))!.state).toBe('running');
  });
});
