import pino from 'pino';
import { beforeEach, describe, expect, it } from 'vitest';
import { pageOfFinishedRuns } from '../../src/db/history/page-of-finished-runs.js';
import { removeRuns } from '../../src/db/history/remove-runs.js';
import { cleanHistory } from '../../src/server/api/clean-history.js';
import { deleteDagWithHistory } from '../../src/server/api/delete-dag.js';
import { FailedPreconditionError, NotFoundError } from '../../src/server/api/errors.js';
import { daysAgo, pastRun, storedOf } from '../helpers/history-fixtures.js';
import { endedRun } from '../helpers/ended-run.js';
import { databaseForFile } from '../helpers/test-database.js';

const db = databaseForFile();
beforeEach(async () => {
  await db.sql`delete from dags`;
  await db.sql`delete from events`;
  await db.sql`delete from task_logs`;
});

const now = new Date();
const tis = (id: number) => [id * 10, id * 10 + 1];
const whole = { run: 1, tis: 2, events: 7, logs: 6 };
const none = { run: 0, tis: 0, events: 0, logs: 0 };
const stored = (id: number) => storedOf(db.sql, id, tis(id));

/** What is in the history tables, row by row: equal before and after means nothing was written. */
async function everything(): Promise<string> {
  const rows = await db.sql<{ t: string }[]>`
    select (select coalesce(string_agg(x::text, ',' order by x.id), '') from dag_runs x) || '|' ||
      (select coalesce(string_agg(x::text, ',' order by x.id), '') from task_instances x) || '|' ||
      (select coalesce(string_agg(x::text, ',' order by x.seq), '') from events x) || '|' ||
      (select coalesce(string_agg(x::text, ',' order by x.ti_id, x.seq), '') from task_logs x) as t`;
  return rows[0]!.t;
}

describe('db clean', () => {
  it('removes exactly the finished runs that ended before the time, with every row of theirs, and nothing else; dry, it counts the same and writes nothing', async () => {
    const cutoff = daysAgo(now, 10);
    const minute = 60_000;
    await pastRun(db.sql, {
      id: 1,
      dagId: 'a',
      state: 'success',
      createdAt: daysAgo(now, 20),
      endedAt: new Date(cutoff.getTime() - minute),
      tiIds: tis(1),
    });
    await pastRun(db.sql, {
      id: 2,
      dagId: 'b',
      state: 'failed',
      createdAt: daysAgo(now, 20),
      endedAt: daysAgo(now, 19),
      tiIds: tis(2),
    });
    await pastRun(db.sql, {
      id: 3,
      dagId: 'a',
      state: 'cancelled',
      createdAt: daysAgo(now, 12),
      endedAt: daysAgo(now, 11),
      tiIds: tis(3),
    });
    await pastRun(db.sql, { id: 4, dagId: 'a', state: 'running', createdAt: daysAgo(now, 30), tiIds: tis(4) });
    await pastRun(db.sql, { id: 5, dagId: 'b', state: 'queued', createdAt: daysAgo(now, 30), tiIds: tis(5) });
    await pastRun(db.sql, {
      id: 6,
      dagId: 'a',
      state: 'success',
      createdAt: daysAgo(now, 11),
      endedAt: new Date(cutoff.getTime() + minute),
      tiIds: tis(6),
    });
    await endedRun(db.sql, now, { id: 7, dagId: 'b', days: 1, tiIds: tis(7) });

    const before = await everything();
    const dry = await cleanHistory(db.sql, { endedBefore: cutoff, dryRun: true });
    expect(dry).toEqual({ runs: 3, taskInstances: 6, events: 21, taskLogs: 18 });
    expect(await everything()).toBe(before);
    const dryA = await cleanHistory(db.sql, { endedBefore: cutoff, dagId: 'a', dryRun: true });
    expect(dryA).toEqual({ runs: 2, taskInstances: 4, events: 14, taskLogs: 12 });

    expect(await cleanHistory(db.sql, { endedBefore: cutoff, dagId: 'a', dryRun: false })).toEqual(dryA);
    for (const id of [1, 3]) expect(await stored(id), `run ${id}`).toEqual(none);
    for (const id of [2, 4, 5, 6, 7]) expect(await stored(id), `run ${id}`).toEqual(whole);
    expect(await cleanHistory(db.sql, { endedBefore: cutoff, dryRun: false })).toEqual({
      runs: 1,
      taskInstances: 2,
      events: 7,
      taskLogs: 6,
    });
    for (const id of [1, 2, 3]) expect(await stored(id), `run ${id}`).toEqual(none);
    for (const id of [4, 5, 6, 7]) expect(await stored(id), `run ${id}`).toEqual(whole);
  });

  it('--keep-last keeps each DAG its N latest finished runs whatever their age, counted the same dry, and never counts a run that has not ended', async () => {
    const cutoff = daysAgo(now, 1);
    // DAG a: finished 1..4, then a running run 5 (the latest, but not finished); DAG b: one finished run.
    for (const id of [1, 2, 3, 4]) await endedRun(db.sql, now, { id, dagId: 'a', days: 30 - id, tiIds: tis(id) });
    await pastRun(db.sql, { id: 5, dagId: 'a', state: 'running', createdAt: daysAgo(now, 20), tiIds: tis(5) });
    await endedRun(db.sql, now, { id: 6, dagId: 'b', state: 'failed', days: 19, tiIds: tis(6) });
    await endedRun(db.sql, now, { id: 7, dagId: 'c', days: 18, tiIds: tis(7) });
    await endedRun(db.sql, now, { id: 8, dagId: 'c', days: 17, tiIds: tis(8) });

    const before = await everything();
    expect(await cleanHistory(db.sql, { endedBefore: cutoff, keepLast: 2, dryRun: true })).toEqual({
      runs: 2,
      taskInstances: 4,
      events: 14,
      taskLogs: 12,
    });
    expect(await everything()).toBe(before);
    expect(await cleanHistory(db.sql, { endedBefore: cutoff, keepLast: 1, dagId: 'a', dryRun: true })).toMatchObject({
      runs: 3,
    });
    expect(await cleanHistory(db.sql, { endedBefore: cutoff, keepLast: 2, dryRun: false })).toEqual({
      runs: 2,
      taskInstances: 4,
      events: 14,
      taskLogs: 12,
    });
    for (const id of [1, 2]) expect(await stored(id), `run ${id}`).toEqual(none);
    for (const id of [3, 4, 5, 6, 7, 8]) expect(await stored(id), `run ${id}`).toEqual(whole);
    expect(await cleanHistory(db.sql, { endedBefore: cutoff, keepLast: 1, dryRun: false })).toEqual({
      runs: 2,
      taskInstances: 4,
      events: 14,
      taskLogs: 12,
    });
    for (const id of [1, 2, 3, 7]) expect(await stored(id), `run ${id}`).toEqual(none);
    for (const id of [4, 5, 6, 8]) expect(await stored(id), `run ${id}`).toEqual(whole);
    // Each DAG's latest finished run again: nothing more to remove.
    expect(await cleanHistory(db.sql, { endedBefore: cutoff, keepLast: 1, dryRun: false })).toEqual({
      runs: 0,
      taskInstances: 0,
      events: 0,
      taskLogs: 0,
    });
    expect(await cleanHistory(db.sql, { endedBefore: cutoff, keepLast: 0, dryRun: false })).toMatchObject({ runs: 3 });
    expect(await stored(5)).toEqual(whole);
  });

  it('reads runs in pages bounded by task instances, and stops at the first run made after the time', async () => {
    for (let id = 1; id <= 6; id++) await endedRun(db.sql, now, { id, dagId: 'a', days: 20 - id, tiIds: tis(id) });
    await endedRun(db.sql, now, { id: 7, dagId: 'a', days: 1, tiIds: tis(7) });
    await endedRun(db.sql, now, { id: 8, dagId: 'a', days: 30, tiIds: tis(8) });
    const q = { endedBefore: daysAgo(now, 5), scan: 100, maxTis: 5 };
    expect(await pageOfFinishedRuns(db.sql, { ...q, after: '0' })).toEqual({ ids: ['1', '2'], tis: 4, next: '2' });
    expect(await pageOfFinishedRuns(db.sql, { ...q, after: '2' })).toEqual({ ids: ['3', '4'], tis: 4, next: '4' });
    // Run 7 was made a day ago: it cannot have ended 5 days ago, and neither can any after it
    // (run 8's times are made up: ids follow creation), so the reading stops there.
    expect(await pageOfFinishedRuns(db.sql, { ...q, after: '4' })).toEqual({ ids: ['5', '6'], tis: 4, next: null });
    expect(await pageOfFinishedRuns(db.sql, { ...q, after: '0', scan: 3 })).toEqual({
      ids: ['1', '2'],
      tis: 4,
      next: '2',
    });
    expect(await pageOfFinishedRuns(db.sql, { ...q, after: '2', scan: 1 })).toEqual({ ids: ['3'], tis: 2, next: '3' });
  });

  it('keeps a run picked for removal that was cleared back to running before the removal, and all of its history', async () => {
    await endedRun(db.sql, now, { id: 1, dagId: 'a', days: 20, tiIds: tis(1) });
    const page = await pageOfFinishedRuns(db.sql, { endedBefore: daysAgo(now, 5), after: '0', scan: 100, maxTis: 100 });
    expect(page.ids).toEqual(['1']);
    await db.sql`update dag_runs set state = 'running', ended_at = null where id = 1`;
    expect(await removeRuns(db.sql, page.ids, { endedBefore: daysAgo(now, 5) })).toEqual({
      runs: 0,
      taskInstances: 0,
      events: 0,
      taskLogs: 0,
    });
    expect(await stored(1)).toEqual(whole);
  });
});

describe('dag delete', () => {
  const deps = (stopped: { tiIds: string[]; reason: string }[]) => ({
    sql: db.sql,
    logger: pino({ level: 'silent' }),
    stopAttempts: (tiIds: string[], reason: string): void => void stopped.push({ tiIds, reason }),
    attemptsEndWithinMs: 2000,
  });

  it('removes everything of the DAG (its runs, their task instances, events and lines, its own events) and nothing of another', async () => {
    await endedRun(db.sql, now, { id: 1, dagId: 'a', days: 2, tiIds: tis(1) });
    await endedRun(db.sql, now, { id: 2, dagId: 'b', days: 2, tiIds: tis(2) });
    await endedRun(db.sql, now, { id: 3, dagId: 'a', state: 'failed', days: 1, tiIds: tis(3) });
    await db.sql`insert into events (run_id, kind, payload) values (null, 'dag.applied', '{"dag_id": "a", "version": 1}'), (null, 'dag.applied', '{"dag_id": "b", "version": 1}')`;
    const stopped: { tiIds: string[]; reason: string }[] = [];
    const out = await deleteDagWithHistory(deps(stopped), 'a', false);
    expect(out).toEqual({ removed: { runs: 2, taskInstances: 4, events: 15, taskLogs: 12 }, cancelledRunIds: [] });
    expect(stopped).toEqual([]);
    for (const id of [1, 3]) expect(await stored(id)).toEqual(none);
    expect(await stored(2)).toEqual(whole);
    expect(await db.sql`select dag_id from dags order by 1`).toEqual([{ dag_id: 'b' }]);
    expect(await db.sql`select payload->>'dag_id' as dag from events where run_id is null`).toEqual([{ dag: 'b' }]);
    await expect(deleteDagWithHistory(deps(stopped), 'a', false)).rejects.toThrow(
      new NotFoundError('DAG "a" not found'),
    );
  });

  it('refuses while a run has not ended, removing nothing; with force it pauses the DAG, cancels the run, stops its attempts, waits for their ends, then removes it all', async () => {
    await endedRun(db.sql, now, { id: 1, dagId: 'a', days: 2, tiIds: tis(1) });
    await pastRun(db.sql, { id: 2, dagId: 'a', state: 'running', createdAt: daysAgo(now, 1), tiIds: tis(2) });
    await pastRun(db.sql, { id: 3, dagId: 'a', state: 'queued', createdAt: daysAgo(now, 1), tiIds: tis(3) });
    await db.sql`update task_instances set pid = 4242 where run_id = 2`;
    const stopped: { tiIds: string[]; reason: string }[] = [];
    const holder = deps(stopped);
    // The holder stops the processes and, 300 ms later, records their last line and their ends.
    const recorded: Promise<void>[] = [];
    holder.stopAttempts = (tiIds, reason) => {
      stopped.push({ tiIds, reason });
      recorded.push(
        new Promise<void>((r) => setTimeout(r, 300)).then(async () => {
          await db.sql`insert into task_logs (ti_id, try_number, seq, stream, line) values (20, 1, 99, 'system', 'killed by SIGTERM')`;
          await db.sql`update task_instances set pid = null where id = any(${tiIds}::bigint[])`;
        }),
      );
    };
    await expect(deleteDagWithHistory(deps(stopped), 'a', false)).rejects.toThrow(
      new FailedPreconditionError(
        'DAG "a" has 2 runs that have not ended (2, 3): cancel them first, or force (--force) to cancel them and delete',
      ),
    );
    for (const id of [1, 2, 3]) expect(await stored(id)).toEqual(whole);
    const out = await deleteDagWithHistory(holder, 'a', true);
    await Promise.all(recorded);
    expect(out.cancelledRunIds).toEqual(['2', '3']);
    // Run 2's two attempts were running: each is stopped wherever it runs.
    expect(stopped).toEqual([{ tiIds: ['20', '21'], reason: 'DAG a deleted' }]);
    expect(out.removed).toMatchObject({ runs: 3, taskInstances: 6, taskLogs: 19 });
    for (const id of [1, 2, 3]) expect(await stored(id)).toEqual(none);
    expect(await db.sql`select 1 from dags`).toEqual([]);
  });
});
