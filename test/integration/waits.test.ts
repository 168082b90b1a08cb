import { beforeEach, describe, expect, it } from 'vitest';
import type { DagSpec } from '../../src/core/dag-spec.js';
import { takeEvent } from '../../src/db/external-events/take-event.js';
import { getRun } from '../../src/db/runs.js';
import { listTis, transitionTis } from '../../src/db/tis.js';
import { endDueWaits } from '../../src/db/waits/end-due-waits.js';
import { endWaits, waitEnds } from '../../src/db/waits/end-waits.js';
import { lockEventName } from '../../src/db/waits/event-name-lock.js';
import { step } from '../../src/scheduler/step.js';
import { attemptFixtures } from '../helpers/attempt-fixtures.js';
import { schedulerHarness } from '../helpers/scheduler-harness.js';
import { dag, task } from '../helpers/spec-builders.js';
import { databaseForFile } from '../helpers/test-database.js';

const BOUND = { timeout: 30_000 };
const db = databaseForFile({ emptyEach: true });
const fixtures = attemptFixtures(() => db.sql, 'subprocess');

beforeEach(async () => {
  await db.sql`delete from external_events`;
});

const waitTask = (id: string, over: Partial<NonNullable<ReturnType<typeof task>['wait']>> = {}) =>
  task(id, { command: [], wait: { event: 'file.landed', timeoutMs: 3_600_000, onTimeout: 'failed', ...over } });

const after = (id: string, dep: string) => task(id, { command: ['true'], dependsOn: [dep] });

async function stepOk() {
  const h = schedulerHarness(db.sql);
  const r = await step(h.ctx);
  expect(r.failedPhases).toEqual([]);
  return { h, r };
}

async function tis(runId: string) {
  return new Map((await listTis(db.sql, runId)).map((t) => [t.task_id, t]));
}

const send = (name: string, payload: Record<string, unknown>, key = `k${Math.random()}`) =>
  takeEvent(db.sql, { name, key, payload, by: undefined, defaultExecutor: 'subprocess' });

async function waitRow(tiId: string) {
  const [row] = await db.sql<
    { outcome: string | null; event_id: string | null; ended_at: Date | null; event: string; match: unknown }[]
  >`select outcome, event_id::text, ended_at, event, match from task_waits where ti_id = ${tiId}`;
  return row!;
}

async function runWithWait(spec: DagSpec, conf: Record<string, unknown> = {}) {
  const { run } = await fixtures.queuedRun(spec, { conf });
  return run;
}

describe('a wait task', () => {
  it(
    'waits holding nothing, ends on a matching event and not on another, once, and its run goes on',
    BOUND,
    async () => {
      const spec = dag('w_match', [waitTask('w', { match: { bucket: 'raw', id: '$conf.id' } }), after('b', 'w')]);
      const run = await runWithWait(spec, { id: 7 });
      const { h } = await stepOk();
      const w = (await tis(run.id)).get('w')!;
      expect(w).toMatchObject({ state: 'waiting', try_number: 0, agent_id: null, attempt_token: null });
      expect(w.pending_reason).toBe('WAITING_FOR_EVENT:file.landed {"bucket":"raw","id":7}');
      // Nothing offered to the dispatcher: a wait holds no slot.
      expect(h.offered.map((o) => o.taskId)).toEqual([]);
      expect(await waitRow(w.id)).toMatchObject({
        event: 'file.landed',
        match: { bucket: 'raw', id: 7 },
        ended_at: null,
      });

      // Wrong name, wrong bucket, wrong id from the conf: nothing ends.
      expect((await send('file.gone', { bucket: 'raw', id: 7 })).endedWaits).toEqual([]);
      expect((await send('file.landed', { bucket: 'cooked', id: 7 })).endedWaits).toEqual([]);
      expect((await send('file.landed', { bucket: 'raw', id: 8 })).endedWaits).toEqual([]);
      expect((await tis(run.id)).get('w')!.state).toBe('waiting');

      const hit = await send('file.landed', { bucket: 'raw', id: 7, path: '/x' }, 'the-one');
      expect(hit.endedWaits).toEqual([{ ti_id: w.id, run_id: run.id, task_id: 'w', state: 'success' }]);
      // The sender's retry, and a second matching event: the wait ended once.
      expect(await send('file.landed', { bucket: 'raw', id: 7 }, 'the-one')).toMatchObject({
        duplicate: true,
        endedWaits: [],
      });
      expect((await send('file.landed', { bucket: 'raw', id: 7 })).endedWaits).toEqual([]);
      expect(await waitRow(w.id)).toMatchObject({ outcome: 'event', event_id: hit.id });
      const ended = (await tis(run.id)).get('w')!;
      expect(ended).toMatchObject({ state: 'success', pending_reason: null });
      expect(ended.ended_at).not.toBeNull();

      const moves = await db.sql<{ payload: Record<string, unknown> }[]>`
      select payload from events where ti_id = ${w.id} and kind = 'ti.state' order by seq`;
      expect(moves.map((m) => m.payload)).toEqual([
        expect.objectContaining({ to: 'waiting', reason: 'WAITING_FOR_EVENT:file.landed {"bucket":"raw","id":7}' }),
        expect.objectContaining({ to: 'success', from: 'waiting', ended_by: 'event', event_id: hit.id }),
      ]);

      // The downstream task is scheduled and offered on the next step.
      const next = await stepOk();
      expect(next.h.offered.map((o) => o.taskId)).toEqual(['b']);
    },
  );

  it('an event ends exactly the waits that match it, each once, across runs', BOUND, async () => {
    const spec = dag('w_two', [waitTask('w', { match: { id: '$conf.id' } })]);
    const one = await runWithWait(spec, { id: 1 });
    const two = await runWithWait(spec, { id: 2 });
    await stepOk();
    const taken = await send('file.landed', { id: 2 });
    expect(taken.endedWaits.map((e) => e.run_id)).toEqual([two.id]);
    expect((await tis(one.id)).get('w')!.state).toBe('waiting');
    expect((await tis(two.id)).get('w')!.state).toBe('success');
    // Two events racing for one wait: it ends once.
    const both = await Promise.all([send('file.landed', { id: 1 }), send('file.landed', { id: 1 })]);
    expect(both.flatMap((b) => b.endedWaits).length).toBe(1);
    await stepOk();
    expect((await getRun(db.sql, one.id))!.state).toBe('success');
    expect((await getRun(db.sql, two.id))!.state).toBe('success');
  });

  it('times out by the leader: failed, or the outcome the DAG names', BOUND, async () => {
    const failing = await runWithWait(dag('w_fail', [waitTask('w', { timeoutMs: 50 }), after('b', 'w')]));
    const skipping = await runWithWait(dag('w_skip', [waitTask('w', { timeoutMs: 50, onTimeout: 'skipped' })]));
    const lasting = await runWithWait(dag('w_last', [waitTask('w')]));
    await stepOk();
    await new Promise((r) => setTimeout(r, 120));
    const { r } = await stepOk();
    expect(r.endDueWaits?.ended).toBe(2);
    expect((await tis(failing.id)).get('w')).toMatchObject({ state: 'failed', error: 'wait ended: timeout' });
    expect((await tis(skipping.id)).get('w')!.state).toBe('skipped');
    expect((await tis(lasting.id)).get('w')!.state).toBe('waiting');
    await stepOk();
    expect((await tis(failing.id)).get('b')!.state).toBe('upstream_failed');
    expect((await getRun(db.sql, failing.id))!.state).toBe('failed');
    expect((await getRun(db.sql, skipping.id))!.state).toBe('success');
    // Ended once: nothing is due any more.
    expect(await endDueWaits(db.sql, 100)).toEqual([]);
  });

  it('counts an event received before it started only within its look back', BOUND, async () => {
    await send('file.landed', { n: 1 });
    await new Promise((r) => setTimeout(r, 300));
    await send('file.landed', { n: 2 });
    const blind = await runWithWait(dag('w_blind', [waitTask('w')]));
    const wide = await runWithWait(dag('w_wide', [waitTask('w', { lookBackMs: 60_000, match: { n: 1 } })]));
    const narrow = await runWithWait(dag('w_narrow', [waitTask('w', { lookBackMs: 200, match: { n: 1 } })]));
    await stepOk();
    expect((await tis(blind.id)).get('w')!.state).toBe('waiting');
    expect((await tis(wide.id)).get('w')!.state).toBe('success');
    expect((await tis(narrow.id)).get('w')!.state).toBe('waiting');
  });

  it('sees an event whose transaction was still open as it started, in its look back', BOUND, async () => {
    // An event's transaction that read the open waits before this wait's row was written (as
    // takeEvent does) and commits only after the wait started: the look back waits for it.
    let commit!: () => void;
    const held = new Promise<void>((r) => (commit = r));
    let locked!: () => void;
    const isLocked = new Promise<void>((r) => (locked = r));
    const event = db.sql.begin(async (tx) => {
      await lockEventName(tx, 'file.landed', 'event');
      await tx`insert into external_events (name, event_key, payload) values ('file.landed', 'racing', '{"n": 1}')`;
      locked();
      await held;
    });
    await isLocked;
    const run = await runWithWait(dag('w_race', [waitTask('w', { lookBackMs: 60_000, match: { n: 1 } })]));
    const stepped = stepOk();
    await new Promise((r) => setTimeout(r, 300));
    commit();
    await event;
    await stepped;
    expect((await tis(run.id)).get('w')!.state).toBe('success');
  });

  it('is guarded: a cancelled wait is not ended by its event, and its row is closed', BOUND, async () => {
    const run = await runWithWait(dag('w_cancel', [waitTask('w')]));
    await stepOk();
    const w = (await tis(run.id)).get('w')!;
    expect(await transitionTis(db.sql, run.id, ['w'], 'cancelled')).toHaveLength(1);
    expect((await send('file.landed', {})).endedWaits).toEqual([]);
    expect((await tis(run.id)).get('w')!.state).toBe('cancelled');
    expect(await waitRow(w.id)).toMatchObject({ outcome: 'gone', event_id: null });
    // And an approval's end on it changes nothing.
    expect(
      await endWaits(db.sql, waitEnds(db.sql, [{ tiId: w.id, to: 'success', how: 'approved', eventId: null }])),
    ).toEqual([]);
  });
});

describe('the deadline query', () => {
  it("reads only the due waits: 10,000 open ones cost the step's query nothing", { timeout: 120_000 }, async () => {
    const spec = dag('w_many', [waitTask('w')]);
    const run = await runWithWait(spec);
    await stepOk();
    const w = (await tis(run.id)).get('w')!;
    const timeIt = async () => {
      const times: number[] = [];
      for (let i = 0; i < 30; i++) {
        const t0 = performance.now();
        await endDueWaits(db.sql, 500);
        times.push(performance.now() - t0);
      }
      return times.sort((a, b) => a - b)[15]!;
    };
    const before = await timeIt();
    // 10,000 more open waits, none due (their rows only: what the deadline query would read).
    await db.sql`
      with runs as (
        insert into dag_runs (dag_id, run_key, run_type, dag_version, logical_date, conf, state)
        select dag_id, 'bulk__' || g, 'manual', dag_version, logical_date, '{}', 'success'
        from dag_runs, generate_series(1, 10000) g where id = ${run.id}
        returning id),
      made as (
        insert into task_instances (run_id, task_id, max_tries, state, executor)
        select id, 'w', 1, 'waiting', 'subprocess' from runs returning id, run_id, task_id)
      insert into task_waits (ti_id, run_id, task_id, kind, event, deadline, on_timeout)
      select id, run_id, task_id, 'event', 'file.landed', now() + interval '1 hour' + (id % 100) * interval '1 s', 'failed'
      from made`;
    await db.sql`analyze task_waits`;
    const [open] = await db.sql<{ n: number }[]>`select count(*)::int as n from task_waits where ended_at is null`;
    expect(open!.n).toBe(10_001);
    const [plan] = await db.sql<{ 'QUERY PLAN': unknown }[]>`
      explain (analyze, format json)
      select ti_id from task_waits where ended_at is null and deadline <= now() order by deadline limit 500`;
    const text = JSON.stringify(plan!['QUERY PLAN']);
    expect(text).toContain('task_waits_open_deadline');
    expect(text).not.toContain('Seq Scan');
    const withMany = await timeIt();
    // eslint-disable-next-line no-console
    console.log(
      `deadline query median: ${before.toFixed(2)} ms with 1 open wait, ${withMany.toFixed(2)} ms with 10,001`,
    );
    expect(withMany).toBeLessThan(before * 3 + 2);
    expect((await tis(run.id)).get('w')!.id).toBe(w.id);
  });
});
