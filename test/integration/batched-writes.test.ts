import { describe, expect, it } from 'vitest';
import type { DagSpec } from '../../src/core/dag-spec.js';
import { PLANS_PER_STATEMENT, applyPlans } from '../../src/db/plan/apply-plans.js';
import { finalizeRuns } from '../../src/db/plan/finalize-runs.js';
import { claimAttempts } from '../../src/db/attempts/claim-attempt.js';
import { flushHeartbeats } from '../../src/db/attempts/flush-heartbeats.js';
import { createReportBatcher } from '../../src/db/attempts/report-batcher.js';
import { touchAgents } from '../../src/db/agents.js';
import { clearTaskInstance } from '../../src/db/clear-task-instance.js';
import { getRun, type RunRow } from '../../src/db/runs.js';
import type { Sql } from '../../src/db/sql.js';
import { HeartbeatBuffer, type HeartbeatSource } from '../../src/server/agents/heartbeat-buffer.js';
import pino from 'pino';
import { listTis, setPendingReasons, type TiRow } from '../../src/db/tis.js';
import { dag, task } from '../helpers/spec-builders.js';
import { quietLogWriter } from '../helpers/quiet-log-writer.js';
import { countWhenSent } from '../helpers/watching-sql.js';
import { databaseForFile } from '../helpers/test-database.js';
import { attemptFixtures } from '../helpers/attempt-fixtures.js';

/**
 * The hot paths' multi-row writes (issue #5): the planner's moves for many runs in one statement,
 * guarded per run by the plan epoch and per TI by the state read; the report batcher's group
 * commit of starts and ends; the batched claim. Each test counts the statements it causes.
 */

const db = databaseForFile({ emptyEach: true });

/** The pool, counting the statements sent through it or through a connection it reserved (a
 *  tagged-template call sent; one put into another as a fragment is part of that one). */
function counting(sql: Sql): { sql: Sql; count(): number } {
  let n = 0;
  const count = <T extends object>(target: T): T =>
    new Proxy(target, {
      apply(t, thisArg, args) {
        return countWhenSent(Reflect.apply(t as never, thisArg, args) as object, () => n++);
      },
      get(t, prop, receiver) {
        if (prop !== 'reserve') return Reflect.get(t, prop, receiver);
        return async () => count(await (t as unknown as Sql).reserve());
      },
    });
  return { sql: count(sql), count: () => n };
}

let runSeq = 0;
const fixtures = attemptFixtures(() => db.sql, 'subprocess');
const newRun = (spec: DagSpec) => fixtures.queuedRun(spec, { logicalDate: new Date() });

const chain = (id: string) => dag(id, [task('a'), task('b', { dependsOn: ['a'] })]);

async function states(runId: string): Promise<Record<string, string>> {
  return Object.fromEntries((await listTis(db.sql, runId)).map((t) => [t.task_id, t.state]));
}

describe('applyPlans', () => {
  it('starts runs and moves task instances of many runs in one statement, each move in the events log', async () => {
    const runs = await Promise.all([newRun(chain('p1')), newRun(chain('p2')), newRun(chain('p3'))]);
    const c = counting(db.sql);
    const applied = await applyPlans(
      c.sql,
      runs.map(({ run, tis }) => ({
        runId: run.id,
        epoch: run.plan_epoch,
        start: true,
        moves: [{ tiId: tis.get('a')!.id, from: 'none' as const, to: 'scheduled' as const }],
      })),
    );
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
    const c = counting(db.sql);
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
    const c = counting(db.sql);
    const applied = await applyPlans(
      c.sql,
      runs.map(({ run, tis }) => ({
        runId: run.id,
        epoch: run.plan_epoch,
        start: true,
        moves: [{ tiId: tis.get('a')!.id, from: 'none' as const, to: 'scheduled' as const }],
      })),
    );
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
    const c = counting(db.sql);
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
    const c = counting(db.sql);
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

describe('report batcher', () => {
  async function claimed(n: number) {
    const spec = dag(
      `rb${++runSeq}`,
      Array.from({ length: n }, (_, i) => task(`t${i}`)),
    );
    const { run, tis } = await newRun(spec);
    await db.sql`update dag_runs set state = 'running' where id = ${run.id}`;
    await db.sql`update task_instances set state = 'scheduled' where run_id = ${run.id}`;
    const claims = await claimAttempts(
      db.sql,
      'agents',
      [...tis.values()].map((t) => ({ tiId: t.id, agentId: 'agent-1' })),
    );
    return {
      run,
      attempts: [...claims].map(([tiId, c]) => ({ tiId, tryNumber: c.tryNumber, attemptToken: c.attemptToken })),
    };
  }

  it("writes an attempt's Started and Finished that arrive together once, in one statement, both moves in the events log in order", async () => {
    const { run, attempts } = await claimed(20);
    const c = counting(db.sql);
    const reports = createReportBatcher(c.sql, { retryMs: 1000, logs: quietLogWriter(db.sql) });
    // Each attempt's Started and Finished arrive back to back, all in the same turn.
    const results = await Promise.all(
      attempts.map(async (a, i) => {
        const started = reports.started(a, { pid: 100 + i, agentId: 'agent-1' });
        const finished = reports.finished(a, {
          outcome: i % 2 === 0 ? 'success' : 'failed',
          exitCode: i % 2,
          signal: null,
          error: i % 2 ? 'exit code 1' : null,
        });
        return { started: await started, finished: await finished };
      }),
    );
    // One UPDATE statement writes a row at most once: one row version a TI, not two.
    expect(c.count()).toBe(1);
    expect(results.every((r) => r.started)).toBe(true);
    expect(results.map((r) => r.finished)).toEqual(
      attempts.map((_, i) => ({ verdict: i % 2 === 0 ? 'success' : 'failed', runId: run.id })),
    );
    for (const [i, a] of attempts.entries()) {
      // queued → running → its end, recorded in that order, the running move with its pid.
      const ev = await db.sql<{ to: string; pid: number | null }[]>`
        select payload->>'to' as to, (payload->>'pid')::int as pid from events where ti_id = ${a.tiId} order by seq`;
      expect(ev.map((e) => e.to)).toEqual(['queued', 'running', i % 2 === 0 ? 'success' : 'failed']);
      expect(ev[1]!.pid).toBe(100 + i);
      const [ti] = await db.sql<
        {
          state: string;
          started: boolean;
          ordered: boolean;
          agent_id: string;
          exit_code: number;
          error: string | null;
          pid: number | null;
        }[]
      >`
        select state, started_at is not null as started, started_at <= ended_at as ordered, agent_id, exit_code, error, pid from task_instances where id = ${a.tiId}`;
      expect(ti).toEqual({
        state: i % 2 === 0 ? 'success' : 'failed',
        started: true,
        ordered: true,
        agent_id: 'agent-1',
        exit_code: i % 2,
        error: i % 2 ? 'exit code 1' : null,
        pid: null,
      });
    }
  });

  it('writes a batch of starts, starts with their ends, and ends as three statements in one round trip, each fenced row by row', async () => {
    const { run, attempts } = await claimed(6);
    const [onlyStart, startAndEnd, onlyEnd, resent, stale, twice] = attempts as [
      (typeof attempts)[0],
      (typeof attempts)[0],
      (typeof attempts)[0],
      (typeof attempts)[0],
      (typeof attempts)[0],
      (typeof attempts)[0],
    ];
    const setup = createReportBatcher(db.sql, { retryMs: 1000, logs: quietLogWriter(db.sql) });
    expect(
      await Promise.all([
        setup.started(onlyEnd, { pid: 1, agentId: 'agent-1' }),
        setup.started(resent, { pid: 2, agentId: 'agent-1' }),
      ]),
    ).toEqual([true, true]);
    const c = counting(db.sql);
    const reports = createReportBatcher(c.sql, { retryMs: 1000, logs: quietLogWriter(db.sql) });
    const ok = { outcome: 'success', exitCode: 0, signal: null, error: null } as const;
    const wrong = { ...stale, attemptToken: '00000000-0000-4000-8000-000000000000' };
    const out = await Promise.all([
      reports.started(onlyStart, { pid: 10, agentId: 'agent-1' }),
      reports.started(startAndEnd, { pid: 11, agentId: 'agent-1' }),
      reports.finished(startAndEnd, ok),
      reports.finished(onlyEnd, ok),
      // Sent again after a reconnect: it is running already, so it is only ended.
      reports.started(resent, { pid: 2, agentId: 'agent-1' }),
      reports.finished(resent, ok),
      reports.started(wrong, { pid: 12, agentId: 'agent-1' }),
      reports.finished(wrong, ok),
      reports.started(twice, { pid: 13, agentId: 'agent-1' }),
      reports.finished(twice, ok),
      reports.finished(twice, ok),
    ]);
    const applied = { verdict: 'success', runId: run.id };
    expect(out).toEqual([
      true,
      true,
      applied,
      applied,
      true,
      applied,
      false,
      { verdict: 'rejected', runId: null },
      true,
      applied,
      applied,
    ]);
    expect(c.count()).toBe(3);
    const rows = await db.sql<
      { id: string; state: string }[]
    >`select id, state from task_instances where id = any(${attempts.map((a) => a.tiId)}::bigint[])`;
    expect(Object.fromEntries(rows.map((r) => [r.id, r.state]))).toEqual({
      [onlyStart.tiId]: 'running',
      [startAndEnd.tiId]: 'success',
      [onlyEnd.tiId]: 'success',
      [resent.tiId]: 'success',
      [stale.tiId]: 'queued',
      [twice.tiId]: 'success',
    });
    // Every move logged once, in order: none for the refused reports, no second running for the resent one.
    const moves = async (tiId: string) =>
      (await db.sql<{ to: string }[]>`select payload->>'to' as to from events where ti_id = ${tiId} order by seq`).map(
        (e) => e.to,
      );
    expect(await moves(resent.tiId)).toEqual(['queued', 'running', 'success']);
    expect(await moves(twice.tiId)).toEqual(['queued', 'running', 'success']);
    expect(await moves(stale.tiId)).toEqual(['queued']);
  });

  it('refuses, row by row, reports of superseded attempts and keeps the others', async () => {
    const { attempts } = await claimed(3);
    const reports = createReportBatcher(db.sql, { retryMs: 1000, logs: quietLogWriter(db.sql) });
    const [good, stale, alsoGood] = attempts as [(typeof attempts)[0], (typeof attempts)[0], (typeof attempts)[0]];
    const wrong = { ...stale, attemptToken: '00000000-0000-4000-8000-000000000000' };
    const [s1, s2, s3] = await Promise.all([
      reports.started(good, { pid: 1, agentId: 'agent-1' }),
      reports.started(wrong, { pid: 2, agentId: 'agent-1' }),
      reports.started(alsoGood, { pid: 3, agentId: 'agent-1' }),
    ]);
    expect([s1, s2, s3]).toEqual([true, false, true]);
    const [f1, f2] = await Promise.all([
      reports.finished(good, { outcome: 'success', exitCode: 0, signal: null, error: null }),
      reports.finished(
        { ...good, tryNumber: good.tryNumber + 1 },
        { outcome: 'success', exitCode: 0, signal: null, error: null },
      ),
    ]);
    expect(f1.verdict).toBe('success');
    expect(f2).toEqual({ verdict: 'rejected', runId: null });
    const rows = await db.sql<
      { id: string; state: string }[]
    >`select id, state from task_instances where id = any(${attempts.map((a) => a.tiId)}::bigint[]) order by id`;
    expect(Object.fromEntries(rows.map((r) => [r.id, r.state]))).toEqual({
      [good.tiId]: 'success',
      [stale.tiId]: 'queued',
      [alsoGood.tiId]: 'running',
    });
  });

  it("writes an attempt's buffered log lines ahead of its end, on the same connection, in the same round trip", async () => {
    const { attempts } = await claimed(1);
    const a = attempts[0]!;
    const logs = quietLogWriter(db.sql);
    const c = counting(db.sql);
    const reports = createReportBatcher(c.sql, { retryMs: 1000, logs });
    expect(await reports.started(a, { pid: 1, agentId: 'agent-1' })).toBe(true);
    const before = c.count();
    logs.write(a.tiId, a.tryNumber, a.attemptToken, 'stdout', 'one');
    logs.write(a.tiId, a.tryNumber, a.attemptToken, 'stderr', 'two');
    expect(await reports.finished(a, { outcome: 'success', exitCode: 0, signal: null, error: null })).toMatchObject({
      verdict: 'success',
    });
    // The lines' insert and the end: two statements, nothing before them.
    expect(c.count() - before).toBe(2);
    const lines = await db.sql<{ line: string }[]>`select line from task_logs where ti_id = ${a.tiId} order by seq`;
    expect(lines.map((l) => l.line)).toEqual(['one', 'two']);
  });

  it('lets a log flush already in flight land before the end it precedes', async () => {
    const { attempts } = await claimed(1);
    const a = attempts[0]!;
    const logs = quietLogWriter(db.sql);
    const reports = createReportBatcher(db.sql, { retryMs: 1000, logs });
    await reports.started(a, { pid: 1, agentId: 'agent-1' });
    logs.write(a.tiId, a.tryNumber, a.attemptToken, 'stdout', 'early');
    const flushing = logs.flush();
    expect(logs.busy).toBe(true);
    logs.write(a.tiId, a.tryNumber, a.attemptToken, 'stdout', 'late');
    const ended = reports.finished(a, { outcome: 'success', exitCode: 0, signal: null, error: null });
    await Promise.all([flushing, ended]);
    // Both lines are there once the end is; the end's own statement came after them.
    const rows = await db.sql<{ line: string; before: boolean }[]>`
      select l.line, l.xmin::text::bigint < t.xmin::text::bigint as before from task_logs l join task_instances t on t.id = l.ti_id
      where l.ti_id = ${a.tiId} order by l.seq`;
    expect(rows).toEqual([
      { line: 'early', before: true },
      { line: 'late', before: true },
    ]);
  });

  it('writes a Started that arrives while the reads behind an end are on their way without waiting for them, and settles the end after them', async () => {
    const { attempts } = await claimed(2);
    const [a, b] = attempts as [(typeof attempts)[0], (typeof attempts)[0]];
    await db.sql`update task_instances set state = 'running' where id = ${a.tiId}`;
    const order: string[] = [];
    const reports = createReportBatcher(db.sql, { retryMs: 1000, logs: quietLogWriter(db.sql) });
    // A slow read behind the end, as a run's read could be.
    reports.endsSent.register((on) => on`select pg_sleep(0.3)`.execute().then(() => void order.push('reads')));
    const ended = reports
      .finished(a, { outcome: 'success', exitCode: 0, signal: null, error: null })
      .then((r) => (order.push('end settled'), r));
    await new Promise((r) => setTimeout(r, 50)); // the end is written, the read still runs
    const started = await reports.started(b, { pid: 1, agentId: 'agent-1' });
    order.push('start written');
    expect(started).toBe(true);
    expect((await ended).verdict).toBe('success');
    expect(order).toEqual(['start written', 'reads', 'end settled']);
    await reports.drain();
  });

  it('takes one registrant at a time for what rides behind the ends', () => {
    const reports = createReportBatcher(db.sql, { retryMs: 1000, logs: quietLogWriter(db.sql) });
    const deregister = reports.endsSent.register(() => null);
    expect(() => reports.endsSent.register(() => null)).toThrow(/already registered/);
    deregister();
    expect(() => reports.endsSent.register(() => null)).not.toThrow();
  });

  it('writes a report that arrives while a write is in flight with the next batch', async () => {
    const { attempts } = await claimed(3);
    const c = counting(db.sql);
    const reports = createReportBatcher(c.sql, { retryMs: 1000, logs: quietLogWriter(db.sql) });
    const first = reports.started(attempts[0]!, { pid: 1, agentId: 'agent-1' });
    await new Promise((r) => setImmediate(r)); // the first write is on its way
    const later = [
      reports.started(attempts[1]!, { pid: 2, agentId: 'agent-1' }),
      reports.started(attempts[2]!, { pid: 3, agentId: 'agent-1' }),
    ];
    expect(await Promise.all([first, ...later])).toEqual([true, true, true]);
    expect(c.count()).toBe(2);
    await reports.drain();
  });

  it('records a start at the time it was reported, however long its batch waited behind the one before', async () => {
    // Seen failing before the fix: started_at was the late statement's now(), so a 5 s task whose
    // start waited behind a busy batch was recorded as 4.9 s (test/fault/long-task.test.ts in CI).
    const { attempts } = await claimed(4);
    const reports = createReportBatcher(db.sql, { retryMs: 1000, logs: quietLogWriter(db.sql) });
    const held = await db.sql.reserve();
    await held`begin`;
    await held`select 1 from task_instances where id = ${attempts[0]!.tiId} for update`;
    const first = reports.started(attempts[0]!, { pid: 1, agentId: 'agent-1' }); // waits for the row lock
    await new Promise((r) => setTimeout(r, 50));
    const reportedAt = Date.now();
    const later = reports.started(attempts[1]!, { pid: 2, agentId: 'agent-1' });
    const laterEnd = reports.finished(attempts[1]!, { outcome: 'success', exitCode: 0, signal: null, error: null });
    const alone = reports.started(attempts[2]!, { pid: 3, agentId: 'agent-1' });
    await new Promise((r) => setTimeout(r, 600));
    await held`commit`;
    held.release();
    expect(await Promise.all([first, later, alone])).toEqual([true, true, true]);
    expect((await laterEnd).verdict).toBe('success');
    const rows = await db.sql<{ id: string; started_ms: number; ended_ms: number | null }[]>`
      select id, extract(epoch from started_at)::float8 * 1000 as started_ms,
        extract(epoch from ended_at)::float8 * 1000 as ended_ms
      from task_instances where id in ${db.sql([attempts[1]!.tiId, attempts[2]!.tiId])}`;
    for (const r of rows) expect(Math.abs(r.started_ms - reportedAt)).toBeLessThan(100);
    // Started and Finished written together: the start is its report's time, never after the end.
    const both = rows.find((r) => r.id === attempts[1]!.tiId)!;
    expect(both.started_ms).toBeLessThanOrEqual(both.ended_ms!);
    await reports.drain();
  });
});

describe('a batch poisoned by one member', () => {
  async function claimed(n: number) {
    const spec = dag(
      `pb${++runSeq}`,
      Array.from({ length: n }, (_, i) => task(`t${i}`)),
    );
    const { run, tis } = await newRun(spec);
    await db.sql`update dag_runs set state = 'running' where id = ${run.id}`;
    await db.sql`update task_instances set state = 'scheduled' where run_id = ${run.id}`;
    const claims = await claimAttempts(
      db.sql,
      'agents',
      [...tis.values()].map((t) => ({ tiId: t.id, agentId: 'agent-1' })),
    );
    return {
      run,
      attempts: [...claims].map(([tiId, c]) => ({ tiId, tryNumber: c.tryNumber, attemptToken: c.attemptToken })),
    };
  }
  const ok = { outcome: 'success', exitCode: 0, signal: null, error: null } as const;
  const settled = <T>(p: Promise<T>) =>
    p.then(
      (v) => ({ ok: v }),
      (err: unknown) => ({ code: (err as { code?: string }).code }),
    );

  it('the report batcher splits it: only the report the database refuses fails, every other report of the batch is written', async () => {
    const { run, attempts } = await claimed(5);
    const [s1, s2, both, e1, e2] = attempts as [
      (typeof attempts)[0],
      (typeof attempts)[0],
      (typeof attempts)[0],
      (typeof attempts)[0],
      (typeof attempts)[0],
    ];
    const setup = createReportBatcher(db.sql, { retryMs: 1000, logs: quietLogWriter(db.sql) });
    expect(
      await Promise.all([
        setup.started(e1, { pid: 1, agentId: 'agent-1' }),
        setup.started(e2, { pid: 2, agentId: 'agent-1' }),
      ]),
    ).toEqual([true, true]);
    const reports = createReportBatcher(db.sql, { retryMs: 1000, logs: quietLogWriter(db.sql) });
    // A token that is no UUID: Postgres refuses the whole statement it is in (22P02).
    const poison = { ...s2, attemptToken: 'not-a-uuid' };
    const out = await Promise.all([
      settled(reports.started(s1, { pid: 10, agentId: 'agent-1' })),
      settled(reports.started(poison, { pid: 11, agentId: 'agent-2' })),
      settled(reports.started(s2, { pid: 12, agentId: 'agent-1' })),
      settled(reports.started(both, { pid: 13, agentId: 'agent-1' })),
      settled(reports.finished(both, ok)),
      settled(reports.started({ ...poison, tiId: both.tiId }, { pid: 14, agentId: 'agent-2' })),
      settled(reports.finished({ ...poison, tiId: both.tiId }, ok)),
      settled(reports.finished(e1, ok)),
      settled(reports.finished({ ...poison, tiId: e1.tiId }, ok)),
      settled(reports.finished(e2, { outcome: 'failed', exitCode: 3, signal: null, error: 'exit code 3' })),
    ]);
    const applied = { ok: { verdict: 'success', runId: run.id } };
    expect(out).toEqual([
      { ok: true },
      { code: '22P02' },
      { ok: true },
      { ok: true },
      applied,
      { code: '22P02' },
      { code: '22P02' },
      applied,
      { code: '22P02' },
      { ok: { verdict: 'failed', runId: run.id } },
    ]);
    const rows = await db.sql<
      { id: string; state: string }[]
    >`select id, state from task_instances where id = any(${attempts.map((a) => a.tiId)}::bigint[])`;
    expect(Object.fromEntries(rows.map((r) => [r.id, r.state]))).toEqual({
      [s1.tiId]: 'running',
      [s2.tiId]: 'running',
      [both.tiId]: 'success',
      [e1.tiId]: 'success',
      [e2.tiId]: 'failed',
    });
  });

  it("the heartbeat buffer splits it: one agent's refused keepalive closes its stream alone, the others' heartbeats are written", async () => {
    const { attempts } = await claimed(3);
    await db.sql`update task_instances set heartbeat_at = null where id = any(${attempts.map((a) => a.tiId)}::bigint[])`;
    const refused: string[] = [];
    const source = (agentId: string): HeartbeatSource => ({
      agentId,
      sessionId: '00000000-0000-4000-8000-00000000000' + agentId.slice(-1),
      superseded: () => {},
      refused: () => refused.push(agentId),
    });
    const buffer = new HeartbeatBuffer(
      { flushHeartbeats: (refs) => flushHeartbeats(db.sql, refs), touchAgents: (s) => touchAgents(db.sql, s) },
      pino({ level: 'silent' }),
      60_000,
    );
    buffer.note(source('agent-1'), [attempts[0]!]);
    buffer.note(source('agent-2'), [attempts[1]!, { ...attempts[2]!, attemptToken: 'not-a-uuid' }]);
    buffer.note(source('agent-3'), [attempts[2]!]);
    await buffer.flush();
    expect(refused).toEqual(['agent-2']);
    const rows = await db.sql<{ id: string; beat: boolean }[]>`
      select id, heartbeat_at is not null as beat from task_instances where id = any(${attempts.map((a) => a.tiId)}::bigint[])`;
    expect(Object.fromEntries(rows.map((r) => [r.id, r.beat]))).toEqual({
      [attempts[0]!.tiId]: true,
      [attempts[1]!.tiId]: false,
      [attempts[2]!.tiId]: true,
    });
  });
});

describe('claimAttempts', () => {
  it('claims many task instances for their agents in one statement', async () => {
    const spec = dag('cl', [task('a'), task('b'), task('c')]);
    const { run, tis } = await newRun(spec);
    await db.sql`update dag_runs set state = 'running' where id = ${run.id}`;
    await db.sql`update task_instances set state = 'scheduled' where run_id = ${run.id} and task_id in ('a', 'b')`;
    const c = counting(db.sql);
    const made = await claimAttempts(c.sql, 'agents', [
      { tiId: tis.get('a')!.id, agentId: 'x' },
      { tiId: tis.get('b')!.id, agentId: 'y' },
      { tiId: tis.get('c')!.id, agentId: 'x' }, // not scheduled: not claimed
    ]);
    expect(c.count()).toBe(1);
    expect([...made.keys()].sort()).toEqual([tis.get('a')!.id, tis.get('b')!.id].sort());
    const rows = await listTis(db.sql, run.id);
    expect(rows.map((t) => [t.task_id, t.state, t.agent_id, t.try_number])).toEqual([
      ['a', 'queued', 'x', 1],
      ['b', 'queued', 'y', 1],
      ['c', 'none', null, 0],
    ]);
  });
});
