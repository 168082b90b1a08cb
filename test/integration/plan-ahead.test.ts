import { beforeEach, describe, expect, it } from 'vitest';
import type { AttemptKey, AttemptResult } from '../../src/core/attempt.js';
import type { DagSpec } from '../../src/core/dag-spec.js';
import { createReportBatcher } from '../../src/db/attempts/report-batcher.js';
import { startAttempt } from '../../src/db/attempts/start-attempt.js';
import { upsertDag } from '../../src/db/dags.js';
import { createRun, type RunRow } from '../../src/db/runs.js';
import { listTis } from '../../src/db/tis.js';
import type { WorkItem } from '../../src/core/work-item.js';
import { planAhead, planBehindEnds } from '../../src/scheduler/plan-ahead.js';
import { step } from '../../src/scheduler/step.js';
import { quietLogWriter } from '../helpers/quiet-log-writer.js';
import { dag, task } from '../helpers/spec-builders.js';
import { databaseForFile } from '../helpers/test-database.js';
import { leaderHarness } from '../helpers/scheduler-harness.js';
import type { ScriptedClaimRoom } from '../helpers/test-dispatcher.js';
import { watching } from '../helpers/watching-sql.js';

/**
 * Planning ahead of an end: the leader decides a run from what it last knew of it, with the
 * attempt that is ending taken as a success, and sends the next tasks' moves (and claims) right
 * behind the end on the same connection, in the same round trip. The database applies such a plan
 * only if every state it assumed holds at the write: an end refused, an out-of-date memory or a
 * paused DAG moves nothing.
 */

const OK: AttemptResult = { exitCode: 0, signal: null, error: null, outcome: 'success' };
const FAIL: AttemptResult = { exitCode: 1, signal: null, error: 'exit code 1', outcome: 'failed' };

const db = databaseForFile();
beforeEach(async () => {
  await db.sql`delete from dags`;
});

/** A leader's context with a memory of runs, a pool that takes everything, and the batcher that
 *  plans ahead of the ends it writes; counts what goes through the pool and what is reserved. */
function leader() {
  const watched = watching(db.sql);
  const base = { direct: 0, reserved: 0 };
  const { ctx, script, offered, errors } = leaderHarness(db.sql);
  const memory = ctx.memory!;
  const reports = createReportBatcher(watched.sql, { retryMs: 1000, logs: quietLogWriter(db.sql) });
  reports.endsSent.register((on, ends) => planBehindEnds(ctx, on, ends));
  return {
    ctx,
    script,
    memory,
    offered,
    errors,
    reports,
    counts: () => ({ direct: watched.direct() - base.direct, reserved: watched.reserved() - base.reserved }),
    reset: () => ((base.direct = watched.direct()), (base.reserved = watched.reserved()), (offered.length = 0)),
  };
}

async function trigger(spec: DagSpec, runKey = 'r'): Promise<RunRow> {
  const { dag: row } = await upsertDag(db.sql, spec, `${spec.dagId}.yaml`);
  const { run } = await db.sql.begin((tx) =>
    createRun(tx, {
      dagId: spec.dagId,
      dagVersion: row.version,
      runKey,
      runType: 'manual',
      logicalDate: new Date(),
      conf: {},
      defaultExecutor: 'subprocess',
    }),
  );
  return run;
}

async function runState(runId: string): Promise<string> {
  return (await db.sql<{ state: string }[]>`select state from dag_runs where id = ${runId}`)[0]!.state;
}

async function states(runId: string): Promise<Record<string, string>> {
  return Object.fromEntries((await listTis(db.sql, runId)).map((t) => [t.task_id, t.state]));
}

/** The attempt claimed with its move and offered for this task, started. */
async function started(offered: WorkItem[], taskId: string): Promise<AttemptKey> {
  const item = offered.find((o) => o.taskId === taskId);
  expect(item?.claim, `${taskId} offered with its claim`).toBeDefined();
  const a = { tiId: item!.tiId, tryNumber: item!.claim!.tryNumber, attemptToken: item!.claim!.attemptToken };
  expect(await startAttempt(db.sql, a, { pid: 1, agentId: null })).toBe(true);
  return a;
}

/** A run of `spec` triggered and stepped by this leader, its task `a` claimed with its move and
 *  started. */
async function aStarted(l: ReturnType<typeof leader>, spec: DagSpec): Promise<{ run: RunRow; a: AttemptKey }> {
  const run = await trigger(spec);
  await step(l.ctx);
  return { run, a: await started(l.offered, 'a') };
}

describe('planning ahead of an end', () => {
  it('claims the next task of a chain in the round trip that records the end, and offers it claimed', async () => {
    const l = leader();
    const { run, a } = await aStarted(
      l,
      dag('ahead_chain', [task('a'), task('b', { dependsOn: ['a'] }), task('c', { dependsOn: ['b'] })]),
    );
    expect(l.memory.ofTi(a.tiId)?.run.id).toBe(run.id);
    l.reset();

    // No step between the end and the next claim: the end's write carries it.
    expect(await l.reports.finished(a, OK)).toEqual({ verdict: 'success', runId: run.id });
    expect(await states(run.id)).toEqual({ a: 'success', b: 'queued', c: 'none' });
    expect(l.offered.map((o) => o.taskId)).toEqual(['b']);
    // The end, the plan and the run's reads went down one reserved connection, nothing else.
    expect(l.counts()).toEqual({ direct: 0, reserved: 1 });
    const events = await db.sql<{ payload: { task_id: string; to: string } }[]>`
      select payload from events where run_id = ${run.id} and kind = 'ti.state' and payload->>'task_id' = 'b' order by seq`;
    expect(events.map((e) => e.payload.to)).toEqual(['scheduled', 'queued']);

    // The plan applied, so the memory it left is current: no read of the run went behind the end,
    // and the step the end nudges decides from that memory, reading and writing nothing.
    expect(l.ctx.memory!.readsKept).toBe(0);
    const watched = watching(db.sql);
    const after = await step({ ...l.ctx, sql: watched.sql }, 'light', { all: false, runIds: [run.id], queued: 0 });
    expect(after.plan?.runsAdvanced).toBe(1);
    expect({ direct: watched.direct(), reserved: watched.reserved() }).toEqual({ direct: 0, reserved: 0 });
    expect(await states(run.id)).toEqual({ a: 'success', b: 'queued', c: 'none' });

    // And again from what the plan ahead itself left in memory.
    const b = await started(l.offered, 'b');
    l.reset();
    await l.reports.finished(b, OK);
    expect(await states(run.id)).toEqual({ a: 'success', b: 'success', c: 'queued' });
    expect(l.errors).toEqual([]);
  });

  it('moves nothing when the end is refused (a stale attempt): its success was only assumed', async () => {
    const l = leader();
    const { run, a } = await aStarted(l, dag('ahead_refused', [task('a'), task('b', { dependsOn: ['a'] })]));
    l.reset();
    const stale = { ...a, attemptToken: '00000000-0000-4000-8000-000000000000' };
    expect((await l.reports.finished(stale, OK)).verdict).toBe('rejected');
    expect(await states(run.id)).toEqual({ a: 'running', b: 'none' });
    expect(l.offered).toEqual([]);
    expect(l.errors).toEqual([]);
  });

  it('moves nothing when the memory is out of date: an upstream state it assumed does not hold', async () => {
    const l = leader();
    // c runs once a and b both succeed.
    const { run, a } = await aStarted(
      l,
      dag('ahead_stale', [task('a'), task('b'), task('c', { dependsOn: ['a', 'b'] })]),
    );
    const b = await started(l.offered, 'b');
    // b fails, but the memory is told it succeeded (as a memory gone stale would say).
    await l.reports.finished(b, FAIL);
    const read = l.memory.ofTi(a.tiId)!;
    l.memory.remember({ ...read, tis: read.tis.map((t) => (t.task_id === 'b' ? { ...t, state: 'success' } : t)) });
    // (b's end had its read sent behind it; the step it nudged would have taken it.)
    l.ctx.memory!.dropReads();
    l.reset();
    await l.reports.finished(a, OK);
    // Not scheduled on a success that never happened; the step that follows decides from a read.
    expect(await states(run.id)).toEqual({ a: 'success', b: 'failed', c: 'none' });
    expect(l.offered).toEqual([]);
    // No read went behind the end (the plan was to leave a current memory), so the step the end
    // nudges reads the run itself: its two reads, then c's move and the run's end.
    expect(l.ctx.memory!.readsKept).toBe(0);
    const watched = watching(db.sql);
    await step({ ...l.ctx, sql: watched.sql }, 'light', { all: false, runIds: [run.id], queued: 0 });
    expect(watched.direct()).toBe(4);
    expect(await states(run.id)).toEqual({ a: 'success', b: 'failed', c: 'upstream_failed' });
    expect(await runState(run.id)).toBe('failed');
  });

  it('leaves the memory current only if nothing else reached the run while the plan was on its way', async () => {
    const spec = dag('ahead_current', [task('a'), task('b'), task('c', { dependsOn: ['a'] })]);
    // Planned and applied with nothing in between: the memory is current, once.
    {
      const l = leader();
      const { run, a } = await aStarted(l, spec);
      await started(l.offered, 'b');
      await db.sql`update task_instances set state = 'success', ended_at = now() where id = ${a.tiId}`;
      const planned = planAhead(l.ctx, db.sql, [{ tiId: a.tiId, outcome: 'success' }]);
      expect(planned.plannedFromMemory).toEqual(new Set([a.tiId]));
      await planned.done;
      expect(await states(run.id)).toEqual({ a: 'success', b: 'running', c: 'queued' });
      expect([...l.memory.takeCurrentReads([run.id]).keys()]).toEqual([run.id]);
      expect(l.memory.takeCurrentReads([run.id]).size).toBe(0);
    }
    // Another end of the run on its way meanwhile (b's): the plan applies, the memory is not current.
    for (const meanwhile of ['stale', 'forget'] as const) {
      await db.sql`delete from dags`;
      const l = leader();
      const { run, a } = await aStarted(l, spec);
      const b = await started(l.offered, 'b');
      await db.sql`update task_instances set state = 'success', ended_at = now() where id = ${a.tiId}`;
      const planned = planAhead(l.ctx, db.sql, [{ tiId: a.tiId, outcome: 'success' }]);
      if (meanwhile === 'stale') l.memory.noteEndsInFlight([b.tiId]);
      else {
        // Forgotten (a clear, say) and remembered again from a read before the plan answered.
        const read = l.memory.ofTi(a.tiId)!;
        l.memory.forget([run.id]);
        l.memory.remember(read);
      }
      await planned.done;
      expect(await states(run.id)).toEqual({ a: 'success', b: 'running', c: 'queued' });
      expect(l.memory.takeCurrentReads([run.id]).size).toBe(0);
    }
  });

  it('reads behind the ends of a run with a failure among them, planned ahead or not', async () => {
    const l = leader();
    const { run, a } = await aStarted(l, dag('ahead_mixed', [task('a'), task('b'), task('c', { dependsOn: ['a'] })]));
    const b = await started(l.offered, 'b');
    l.reset();
    // Both ends in one batch: a's success plans c ahead, b's failure is the step's.
    await Promise.all([l.reports.finished(a, OK), l.reports.finished(b, FAIL)]);
    expect(await states(run.id)).toEqual({ a: 'success', b: 'failed', c: 'queued' });
    expect(l.ctx.memory!.readsKept).toBe(1);
    expect(l.memory.takeCurrentReads([run.id]).size).toBe(0);
  });

  it('moves nothing in a DAG paused since the memory was taken', async () => {
    const l = leader();
    const { run, a } = await aStarted(l, dag('ahead_paused', [task('a'), task('b', { dependsOn: ['a'] })]));
    await db.sql`update dags set paused = true where dag_id = 'ahead_paused'`;
    l.reset();
    await l.reports.finished(a, OK);
    expect(await states(run.id)).toEqual({ a: 'success', b: 'none' });
    expect(l.offered).toEqual([]);
  });

  it('plans ahead only successes: a failure is left to the step', async () => {
    const l = leader();
    const { run, a } = await aStarted(l, dag('ahead_fail', [task('a'), task('b', { dependsOn: ['a'] })]));
    l.reset();
    await l.reports.finished(a, FAIL);
    expect(await states(run.id)).toEqual({ a: 'failed', b: 'none' });
    expect(l.offered).toEqual([]);
    expect(planAhead(l.ctx, db.sql, [{ tiId: a.tiId, outcome: 'failed' }])).toEqual({
      done: null,
      endingTis: new Set(),
      plannedFromMemory: new Set(),
    });
  });

  it('ends a run in the round trip that records the end of its last task; the step that follows reads nothing for it', async () => {
    const l = leader();
    const { run, a } = await aStarted(l, dag('ahead_last', [task('a')]));
    l.reset();
    expect(await l.reports.finished(a, OK)).toEqual({ verdict: 'success', runId: run.id });
    // Ended before any step, by the end's own round trip: no read went with it.
    expect(await runState(run.id)).toBe('success');
    expect(l.counts()).toEqual({ direct: 0, reserved: 1 });
    const events = await db.sql<
      { to: string }[]
    >`select payload->>'to' as to from events where run_id = ${run.id} and kind = 'run.state' order by seq`;
    expect(events.map((e) => e.to)).toEqual(['queued', 'running', 'success']);
    // The step the end nudges has nothing to read or write.
    l.reset();
    const result = await step(l.ctx, 'light', { all: false, runIds: [run.id], queued: 0 });
    expect(result.plan?.runsFinalized).toBe(1);
    expect(l.counts()).toEqual({ direct: 0, reserved: 0 });
    expect(l.errors).toEqual([]);
  });

  it('does not end a run when a state it assumed does not hold; the step decides it from a read', async () => {
    const l = leader();
    const { run, a } = await aStarted(l, dag('ahead_last_stale', [task('a'), task('b')]));
    const b = await started(l.offered, 'b');
    await l.reports.finished(b, FAIL);
    // The memory says b succeeded (as a memory gone stale would).
    const read = l.memory.ofTi(a.tiId) ?? {
      run: { ...run, state: 'running' as const, dag_paused: false, running_in_dag: null },
      tis: await listTis(db.sql, run.id),
    };
    l.memory.remember({
      ...read,
      tis: read.tis.map((t) =>
        t.task_id === 'b' ? { ...t, state: 'success' } : t.task_id === 'a' ? { ...t, state: 'running' } : t,
      ),
    } as never);
    await l.reports.finished(a, OK);
    expect(await runState(run.id)).toBe('running');
    await step(l.ctx, 'light', { all: false, runIds: [run.id], queued: 0 });
    expect(await runState(run.id)).toBe('failed');
    expect(l.errors).toEqual([]);
  });

  it('a run ended ahead makes room at once for a run held back by max_active_runs', async () => {
    const l = leader();
    const spec = { ...dag('ahead_room_runs', [task('a')]), maxActiveRuns: 1 };
    const { run, a } = await aStarted(l, spec);
    const second = await trigger({ ...spec }, 'r2');
    await step(l.ctx);
    expect(await runState(second.id)).toBe('queued');
    expect(l.ctx.heldBackDags!.has('ahead_room_runs')).toBe(true);
    await l.reports.finished(a, OK);
    expect(await runState(run.id)).toBe('success');
    // The step the end nudges starts the run held back, without waiting for a step over every run.
    await step(l.ctx, 'light', { all: false, runIds: [run.id], queued: 0 });
    expect(await runState(second.id)).toBe('running');
    expect(await states(second.id)).toEqual({ a: 'queued' });
  });

  it('schedules a task of a placing executor without claiming it (the executor places and claims it)', async () => {
    const l = leader();
    const { run, a } = await aStarted(
      l,
      dag('ahead_agents', [task('a'), task('b', { dependsOn: ['a'], executor: 'agents' })]),
    );
    l.reset();
    await l.reports.finished(a, OK);
    expect(await states(run.id)).toEqual({ a: 'success', b: 'scheduled' });
    expect(l.offered.map((o) => [o.taskId, o.executor, o.claim])).toEqual([['b', 'agents', undefined]]);
  });

  it('claims agent work with its move for the agent the executor places it on at once, and says how the claim went', async () => {
    const l = leader();
    const placed: [string, string, string | null][] = [];
    let free = true;
    const claimRoom: ScriptedClaimRoom = (l.script.claimRoom = {
      room: () => 100,
      placeNow: (c) => (c.executor === 'agents' && free ? 'agent-7' : null),
      placed: (_executor, agentId, tiId, token) => void placed.push([agentId, tiId, token]),
    });
    const spec = dag('ahead_placed', [
      task('a'),
      task('b', { dependsOn: ['a'], executor: 'agents' }),
      task('c', { dependsOn: ['a'], executor: 'agents' }),
    ]);
    const { run, a } = await aStarted(l, spec);
    l.reset();
    // Ahead of a's end: b placed on agent-7, c finds no agent free and is offered unclaimed.
    claimRoom.placeNow = (c) => (c.executor === 'agents' && free ? ((free = false), 'agent-7') : null);
    await l.reports.finished(a, OK);
    expect(await states(run.id)).toEqual({ a: 'success', b: 'queued', c: 'scheduled' });
    const b = l.offered.find((o) => o.taskId === 'b')!;
    expect(b.claim?.agentId).toBe('agent-7');
    expect(l.offered.find((o) => o.taskId === 'c')?.claim).toBeUndefined();
    expect(placed).toEqual([['agent-7', b.tiId, b.claim!.attemptToken]]);
    const [row] = await db.sql<{ agent_id: string | null }[]>`select agent_id from task_instances where id = ${b.tiId}`;
    expect(row!.agent_id).toBe('agent-7');
    const [ev] = await db.sql<{ agent: string | null }[]>`
      select payload->>'agent_id' as agent from events where ti_id = ${b.tiId} and payload->>'to' = 'queued'`;
    expect(ev!.agent).toBe('agent-7');
  });

  it('gives a placement back when its plan does not apply', async () => {
    const l = leader();
    const placed: [string, string, string | null][] = [];
    const claimRoom: ScriptedClaimRoom = (l.script.claimRoom = {
      room: () => 100,
      placed: (_executor, agentId, tiId, token) => void placed.push([agentId, tiId, token]),
    });
    const { run, a } = await aStarted(
      l,
      dag('ahead_unplaced', [task('a'), task('b', { dependsOn: ['a'], executor: 'agents' })]),
    );
    claimRoom.placeNow = () => 'agent-7';
    await db.sql`update dags set paused = true where dag_id = 'ahead_unplaced'`;
    await l.reports.finished(a, OK);
    const b = (await listTis(db.sql, run.id)).find((t) => t.task_id === 'b')!;
    expect(b.state).toBe('none');
    expect(placed).toEqual([['agent-7', b.id, null]]);
  });

  it('holds the room its claims take until they are offered, so a step meanwhile cannot count it too', async () => {
    const l = leader();
    const log: string[] = [];
    let held = 0;
    const claimRoom = (l.script.claimRoom = {
      room: (_executor: string) => 1 - held,
      hold: (n: number) => {
        held += n;
        log.push(`hold ${n}`);
        return () => {
          held -= n;
          log.push(`unhold ${n}`);
        };
      },
    });
    const offer = l.script.offer;
    l.script.offer = (item) => (log.push(`offer ${item.taskId}${item.claim ? ' claimed' : ''}`), offer(item));
    const run = await trigger(dag('ahead_room', [task('a'), task('b', { dependsOn: ['a'] })]));
    await step(l.ctx);
    expect(log).toEqual(['hold 1', 'offer a claimed', 'unhold 1']);
    const a = await started(l.offered, 'a');
    log.length = 0;
    await db.sql`update task_instances set state = 'success', ended_at = now() where id = ${a.tiId}`;
    // Planned ahead of a's end (as the batcher does, right behind it): while its claim is on the
    // wire the room is taken.
    const ahead = planAhead(l.ctx, db.sql, [{ tiId: a.tiId, outcome: 'success' }]);
    expect(claimRoom.room('subprocess')).toBe(0);
    await ahead.done;
    expect(claimRoom.room('subprocess')).toBe(1);
    expect(log).toEqual(['hold 1', 'offer b claimed', 'unhold 1']);
    expect(await states(run.id)).toEqual({ a: 'success', b: 'queued' });
  });
});
