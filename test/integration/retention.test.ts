import { describe, expect, it } from 'vitest';
import type { HistoryRound } from '../../src/scheduler/history-round.js';
import {
  daysAgo,
  layOutPartitions,
  partitionNames,
  pastRun,
  storedOf,
  type PastRun,
} from '../helpers/history-fixtures.js';
import { quietHistoryRound } from '../helpers/quiet-history-round.js';
import { databaseForFile } from '../helpers/test-database.js';

const DAY_MS = 86_400_000;
const MINUTE_MS = 60_000;

const db = databaseForFile();

/** Task instance ids of run `id`: id·10 + 0…n−1, so runs 1–100 have theirs in [10, 1010), and so on. */
const tis = (id: number, n = 3) => Array.from({ length: n }, (_, k) => id * 10 + k);

type Round = () => Promise<HistoryRound>;

/** The leader's rounds, the first one fresh (as after an election). */
function keeper(clock: { now: Date }, errors: unknown[]): Round {
  const round = quietHistoryRound({
    sql: db.sql,
    retentionMs: 30 * DAY_MS,
    agentRetentionMs: null,
    agentLiveMs: 15_000,
    now: () => clock.now,
    counters: { error: (err) => errors.push(err) },
  });
  let fresh = true;
  return () => {
    const r = round(fresh);
    fresh = false;
    return r;
  };
}

/** Rounds until the keeper says nothing more is waiting (at most `max`). */
async function settle(round: Round, max = 100): Promise<HistoryRound[]> {
  const rounds: HistoryRound[] = [];
  for (let i = 0; i < max; i++) {
    const r = await round();
    rounds.push(r);
    if (!r.more) return rounds;
  }
  throw new Error(`the keeper still had work after ${max} rounds`);
}

describe('retention', () => {
  it('removes exactly the finished runs that ended before the cutoff, never a run that has not ended, and drops or sweeps their history', async () => {
    const now = new Date('2026-06-01T12:00:00Z');
    const clock = { now };
    await layOutPartitions(db.sql, {
      events: [1, 101, 201, 301, 100_000],
      task_logs: [10, 1010, 2010, 3010, 1_000_000],
    });
    const runs: PastRun[] = [];
    const add = (r: Omit<PastRun, 'tiIds' | 'dagId'> & { dagId?: string }) =>
      runs.push({ dagId: 'etl', tiIds: tis(r.id), ...r });
    // Partition 1–100: every run long finished; the partition goes whole.
    for (let id = 1; id <= 20; id++)
      add({ id, state: 'success', createdAt: daysAgo(now, 40), endedAt: daysAgo(now, 40) });
    // 101–200: finished long ago, but run 120 has been running for 45 days: its partition stays,
    // and what else was in it is swept row by row.
    for (let id = 101; id <= 119; id++)
      add({ id, state: 'success', createdAt: daysAgo(now, 45), endedAt: daysAgo(now, 44) });
    add({ id: 120, state: 'running', createdAt: daysAgo(now, 45) });
    // 201–300: run 220 ended 10 days ago: the rest of its partition waits for it.
    for (let id = 201; id <= 219; id++)
      add({ id, dagId: 'other', state: 'failed', createdAt: daysAgo(now, 36), endedAt: daysAgo(now, 35) });
    add({ id: 220, state: 'success', createdAt: daysAgo(now, 36), endedAt: daysAgo(now, 10) });
    // 301–: the partition new runs go to. Each side of the cutoff by a minute.
    for (let id = 301; id <= 305; id++)
      add({
        id,
        state: 'cancelled',
        createdAt: daysAgo(now, 31),
        endedAt: new Date(now.getTime() - 30 * DAY_MS - MINUTE_MS),
      });
    add({ id: 306, state: 'queued', createdAt: daysAgo(now, 60) });
    for (let id = 307; id <= 310; id++)
      add({
        id,
        state: 'success',
        createdAt: daysAgo(now, 31),
        endedAt: new Date(now.getTime() - 30 * DAY_MS + MINUTE_MS),
      });
    for (const r of runs) await pastRun(db.sql, r);
    await db.sql`insert into events (run_id, ti_id, kind, payload) values (null, null, 'dag.applied', '{"dag_id": "etl", "version": 1}')`;

    const errors: unknown[] = [];
    const k = keeper(clock, errors);
    const rounds = await settle(k);
    expect(errors).toEqual([]);
    expect(rounds.reduce((n, r) => n + r.runsRemoved, 0)).toBe(20 + 19 + 19 + 5);

    const stored = async (id: number) => storedOf(db.sql, id, tis(id));
    const none = { run: 0, tis: 0, events: 0, logs: 0 };
    const whole = { run: 1, tis: 3, events: 10, logs: 9 };
    for (const id of [...range(1, 20), ...range(101, 119)]) expect(await stored(id), `run ${id}`).toEqual(none);
    // Removed, their history left for their partition to take.
    for (const id of range(201, 219))
      expect(await stored(id), `run ${id}`).toEqual({ run: 0, tis: 0, events: 10, logs: 9 });
    for (const id of range(301, 305))
      expect(await stored(id), `run ${id}`).toEqual({ run: 0, tis: 0, events: 10, logs: 9 });
    // Kept, whole: not ended, or ended within the retention.
    for (const id of [120, 220, 306, 307, 308, 309, 310]) expect(await stored(id), `run ${id}`).toEqual(whole);
    // The first partitions (below id 1, and 1–100) had no run left: dropped.
    expect(await partitionNames(db.sql, 'events')).toEqual([
      'events_p101',
      'events_p201',
      'events_p301',
      'events_default',
    ]);
    expect(await partitionNames(db.sql, 'task_logs')).toEqual([
      'task_logs_p1010',
      'task_logs_p2010',
      'task_logs_p3010',
      'task_logs_default',
    ]);
    const [dagEvents] = await db.sql<{ n: number }[]>`select count(*)::int as n from events where kind = 'dag.applied'`;
    expect(dagEvents!.n).toBe(1);

    // Three weeks on, run 220 is past its retention too: its partition goes whole.
    clock.now = new Date(now.getTime() + 21 * DAY_MS);
    await settle(k);
    expect(errors).toEqual([]);
    for (const id of range(201, 220)) expect(await stored(id), `run ${id}`).toEqual(none);
    for (const id of range(307, 310))
      expect(await stored(id), `run ${id}`).toEqual({ run: 0, tis: 0, events: 10, logs: 9 });
    for (const id of [120, 306]) expect(await stored(id), `run ${id}`).toEqual(whole);
    expect(await partitionNames(db.sql, 'events')).toEqual(['events_p101', 'events_p301', 'events_default']);
    expect(await partitionNames(db.sql, 'task_logs')).toEqual([
      'task_logs_p1010',
      'task_logs_p3010',
      'task_logs_default',
    ]);
  });

  it('forgets events sent in once past the retention, so their senders may use their keys again', async () => {
    const now = new Date('2026-06-01T12:00:00Z');
    await db.sql`delete from external_events`;
    for (const [key, days] of [
      ['old', 31],
      ['kept', 29],
    ] as const) {
      await db.sql`insert into external_events (name, event_key, payload, received_at)
                   values ('file.landed', ${key}, '{}', ${daysAgo(now, days)})`;
    }
    const errors: unknown[] = [];
    await settle(keeper({ now }, errors));
    expect(errors).toEqual([]);
    const left = await db.sql<{ event_key: string }[]>`select event_key from external_events order by event_key`;
    expect(left.map((r) => r.event_key)).toEqual(['kept']);
  });
});

function range(from: number, to: number): number[] {
  return Array.from({ length: to - from + 1 }, (_, i) => from + i);
}

describe('retention of the completion cache', () => {
  it('removes the entries past their ttl, and keeps the fresh ones and the ones still running', async () => {
    const row = (key: string, state: string, expires: string | null) => db.sql`
      insert into task_cache (dag_id, task_id, spec_hash, key_hash, state, ti_id, try_number, attempt_token, ttl_ms,
        done_at, expires_at)
      values ('etl', 'build', 's', ${key}, ${state}, 1, 1, gen_random_uuid(), 1000,
        case when ${state} = 'done' then now() end, ${expires}::timestamptz)`;
    await row('old', 'done', new Date(Date.now() - 60_000).toISOString());
    await row('fresh', 'done', new Date(Date.now() + 3_600_000).toISOString());
    await row('running', 'running', null);
    const clock = { now: new Date() };
    const errors: unknown[] = [];
    await settle(keeper(clock, errors));
    expect(errors).toEqual([]);
    const left = await db.sql<{ key_hash: string }[]>`select key_hash from task_cache order by key_hash`;
    expect(left.map((r) => r.key_hash)).toEqual(['fresh', 'running']);
  });
});
