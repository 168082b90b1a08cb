/**
 * The report batcher's group commit of starts and ends (issue #5), a batch one member poisons, and
 * the batched claim. Each test counts the statements it causes.
 */
import { describe, expect, it } from 'vitest';
import type { DagSpec } from '../../src/core/dag-spec.js';
import { claimAttempts } from '../../src/db/attempts/claim-attempt.js';
import { flushHeartbeats } from '../../src/db/attempts/flush-heartbeats.js';
import { createReportBatcher } from '../../src/db/attempts/report-batcher.js';
import { touchAgents } from '../../src/db/agents.js';
import { HeartbeatBuffer, type HeartbeatSource } from '../../src/server/agents/heartbeat-buffer.js';
import pino from 'pino';
import { listTis } from '../../src/db/tis.js';
import { dag, task } from '../helpers/spec-builders.js';
import { quietLogWriter } from '../helpers/quiet-log-writer.js';
import { countingStatements } from '../helpers/watching-sql.js';
import { databaseForFile } from '../helpers/test-database.js';
import { attemptFixtures, type AttemptRef } from '../helpers/attempt-fixtures.js';

const db = databaseForFile({ emptyEach: true });

const fixtures = attemptFixtures(() => db.sql, 'subprocess');
const newRun = (spec: DagSpec) => fixtures.queuedRun(spec, { logicalDate: new Date() });

let runSeq = 0;

/** A running run of `n` tasks (DAG `<prefix><seq>`), each claimed for agent-1 in one batch. */
async function claimedRun(prefix: string, n: number) {
  const spec = dag(
    `${prefix}${++runSeq}`,
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

/** `N` claimed attempts, to name one by one. */
type Claims<N extends number, T extends AttemptRef[] = []> = T['length'] extends N ? T : Claims<N, [AttemptRef, ...T]>;

/** Starts `attempts` on agent-1 (pids 1, 2, …) through a batcher of their own, before the one under test. */
function startedAhead(...attempts: AttemptRef[]): Promise<boolean[]> {
  const setup = createReportBatcher(db.sql, { retryMs: 1000, logs: quietLogWriter(db.sql) });
  return Promise.all(attempts.map((a, i) => setup.started(a, { pid: i + 1, agentId: 'agent-1' })));
}

/** The state of each attempt's task instance, by TI id. */
async function statesOf(attempts: AttemptRef[]): Promise<Record<string, string>> {
  const rows = await db.sql<
    { id: string; state: string }[]
  >`select id, state from task_instances where id = any(${attempts.map((a) => a.tiId)}::bigint[])`;
  return Object.fromEntries(rows.map((r) => [r.id, r.state]));
}

describe('report batcher', () => {
  const claimed = (n: number) => claimedRun('rb', n);

  it("writes an attempt's Started and Finished that arrive together once, in one statement, both moves in the events log in order", async () => {
    const { run, attempts } = await claimed(20);
    const c = countingStatements(db.sql);
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
    const [onlyStart, startAndEnd, onlyEnd, resent, stale, twice] = attempts as Claims<6>;
    expect(await startedAhead(onlyEnd, resent)).toEqual([true, true]);
    const c = countingStatements(db.sql);
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
    expect(await statesOf(attempts)).toEqual({
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
    const c = countingStatements(db.sql);
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
    const c = countingStatements(db.sql);
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
  const claimed = (n: number) => claimedRun('pb', n);
  const ok = { outcome: 'success', exitCode: 0, signal: null, error: null } as const;
  const settled = <T>(p: Promise<T>) =>
    p.then(
      (v) => ({ ok: v }),
      (err: unknown) => ({ code: (err as { code?: string }).code }),
    );

  it('the report batcher splits it: only the report the database refuses fails, every other report of the batch is written', async () => {
    const { run, attempts } = await claimed(5);
    const [s1, s2, both, e1, e2] = attempts as Claims<5>;
    expect(await startedAhead(e1, e2)).toEqual([true, true]);
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
    expect(await statesOf(attempts)).toEqual({
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
    const c = countingStatements(db.sql);
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
