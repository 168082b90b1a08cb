import { beforeEach, describe, expect, it } from 'vitest';
import { addPartitionAhead } from '../../src/db/history/add-partition-ahead.js';
import { dropEmptyPartition } from '../../src/db/history/drop-empty-partition.js';
import { EVENTS, TASK_LOGS } from '../../src/db/history/history-tables.js';
import { listPartitions } from '../../src/db/history/list-partitions.js';
import { sweepOrphans } from '../../src/db/history/sweep-orphans.js';
import { createSql, type Sql, type TxSql } from '../../src/db/sql.js';
import { layOutPartitions, partitionNames, pastRun } from '../helpers/history-fixtures.js';
import { databaseForFile } from '../helpers/test-database.js';

const db = databaseForFile();
beforeEach(async () => {
  await db.sql`delete from dags`;
  await db.sql`delete from events`;
  await db.sql`delete from task_logs`;
  await layOutPartitions(db.sql, { events: [1, 101], task_logs: [1, 1001] });
});

const now = new Date('2026-06-01T12:00:00Z');
const DAY = 86_400_000;
const THIRTY_DAYS = 30 * DAY;

/** One-task runs `from`…`to` (task instance id = run id), made `ageMs` before `now`. */
async function runs(from: number, to: number, ageMs: number, state: 'success' | 'running' = 'success') {
  for (let id = from; id <= to; id++) {
    const at = new Date(now.getTime() - ageMs);
    await pastRun(db.sql, { id, dagId: 'etl', state, createdAt: at, endedAt: at, tiIds: [id], lines: 1 });
  }
}

describe('history partitions', () => {
  it('adds the next range once the newest is half used, sized for a day at the rate its ids were used', async () => {
    await runs(1, 49, 3_600_000);
    expect(await addPartitionAhead(db.sql, EVENTS, now, THIRTY_DAYS)).toBeNull();
    await runs(50, 60, 3_600_000);
    // 60 runs in the hour since the range's first: 1,440 a day.
    expect(await addPartitionAhead(db.sql, EVENTS, now, THIRTY_DAYS)).toEqual({
      name: 'events_p101',
      from: 101n,
      to: 1541n,
    });
    expect((await listPartitions(db.sql, EVENTS)).ranges.map((p) => [p.from, p.to])).toEqual([
      [null, 1n],
      [1n, 101n],
      [101n, 1541n],
    ]);
    expect(await addPartitionAhead(db.sql, EVENTS, now, THIRTY_DAYS)).toBeNull();
    // Task instances likewise: 600 since the first one's run, an hour ago, is 14,400 a day.
    expect(await addPartitionAhead(db.sql, TASK_LOGS, now, THIRTY_DAYS)).toBeNull();
    await runs(61, 600, 0);
    expect(await addPartitionAhead(db.sql, TASK_LOGS, now, THIRTY_DAYS)).toEqual({
      name: 'task_logs_p1001',
      from: 1001n,
      to: 15401n,
    });
    // What the new ranges hold: rows of the runs (task instances) in them, with the same checks.
    await runs(1200, 1200, 0);
    const [where] = await db.sql<{ e: string; l: string }[]>`
      select (select min(tableoid::regclass::text) from events where run_id = 1200) as e,
             (select min(tableoid::regclass::text) from task_logs where ti_id = 1200) as l`;
    expect(where).toEqual({ e: 'events_p101', l: 'task_logs_p1001' });
    await expect(
      db.sql`insert into task_logs (ti_id, try_number, seq, stream, line) values (1200, 1, 9, 'neither', 'x')`,
    ).rejects.toMatchObject({ code: '23514' });
  });

  it('sizes a range for a thirtieth of the retention period, a day at least', async () => {
    // 60 runs in the hour since the range's first: 1,440 a day.
    await runs(1, 60, 3_600_000);
    expect(await addPartitionAhead(db.sql, EVENTS, now, 90 * DAY)).toEqual({
      name: 'events_p101',
      from: 101n,
      to: 101n + 3n * 1440n,
    });
    await db.sql`drop table events_p101`;
    expect(await addPartitionAhead(db.sql, EVENTS, now, 7 * DAY)).toEqual({
      name: 'events_p101',
      from: 101n,
      to: 1541n,
    });
    await db.sql`drop table events_p101`;
    // Off, at this rate: a day's worth, as long as the ids used so far are fewer.
    expect(await addPartitionAhead(db.sql, EVENTS, now, null)).toEqual({ name: 'events_p101', from: 101n, to: 1541n });
  });

  it('with retention off makes each range as wide as every id used so far, so their number grows with the logarithm of the history and not one a day', async () => {
    const month = 30 * DAY;
    // A quiet installation (a few runs a day): a day's worth is less than the least span, 1,000.
    await runs(1, 60, month);
    expect(await addPartitionAhead(db.sql, EVENTS, now, null)).toEqual({ name: 'events_p101', from: 101n, to: 1101n });
    await runs(1090, 1090, month);
    // With retention on, the least span again; off, as wide as the 1,090 ids used.
    expect(await addPartitionAhead(db.sql, EVENTS, now, null)).toEqual({
      name: 'events_p1101',
      from: 1101n,
      to: 2191n,
    });
    await runs(2000, 2000, month);
    expect(await addPartitionAhead(db.sql, EVENTS, now, null)).toEqual({
      name: 'events_p2191',
      from: 2191n,
      to: 4191n,
    });
    await runs(4000, 4000, month);
    expect(await addPartitionAhead(db.sql, EVENTS, now, THIRTY_DAYS)).toEqual({
      name: 'events_p4191',
      from: 4191n,
      to: 5191n,
    });
  });

  it('gives a quiet installation ranges of at least the least span', async () => {
    await runs(1, 60, 86_400_000 * 30);
    expect(await addPartitionAhead(db.sql, EVENTS, now, THIRTY_DAYS)).toEqual({
      name: 'events_p101',
      from: 101n,
      to: 1101n,
    });
  });

  it('when ids have outrun every range, their rows wait in the default partition and the new range starts above them', async () => {
    await runs(1, 1, 3_600_000);
    await runs(150, 150, 0);
    const added = await addPartitionAhead(db.sql, EVENTS, now, THIRTY_DAYS);
    expect(added!.from! > 150n).toBe(true);
    const [row] = await db.sql<
      { t: string }[]
    >`select tableoid::regclass::text as t from events where run_id = 150 limit 1`;
    expect(row!.t).toBe('events_default');
  });

  it('drops a partition only under the table lock, waiting no longer than its timeout, and not if a run of its range appeared meanwhile', async () => {
    await runs(150, 150, 0);
    await addPartitionAhead(db.sql, EVENTS, now, THIRTY_DAYS);
    const parts = await listPartitions(db.sql, EVENTS);
    const first = parts.ranges.find((p) => p.name === 'events_p1')!;
    const other = createSql(db.url, { max: 1 });
    try {
      // A writer of events in a transaction that has not ended: the drop gives up after 100 ms.
      const release = await holdOpen(other, async (tx) => {
        await tx`insert into events (run_id, kind) values (150, 'run.state')`;
      });
      const started = performance.now();
      expect(await dropEmptyPartition(db.sql, EVENTS, first, 100)).toBe(false);
      expect(performance.now() - started).toBeLessThan(2000);
      await release();
      // A run made in the range (and its event) by a transaction the drop waits for: once it
      // commits, the drop sees the run and keeps the partition.
      const commit = await holdOpen(other, async (tx) => {
        await tx`insert into dags (dag_id, spec, source, spec_hash, max_active_runs) values ('late', '{}', '', 'h', 1)`;
        await tx`insert into dag_runs (id, dag_id, run_key, run_type, dag_version, logical_date) overriding system value
                 values (7, 'late', 'k7', 'manual', 1, now())`;
        await tx`insert into events (run_id, kind) values (7, 'run.state')`;
      });
      const dropping = dropEmptyPartition(db.sql, EVENTS, first, 5000);
      await new Promise((r) => setTimeout(r, 300));
      await commit();
      expect(await dropping).toBe(false);
      expect(await partitionNames(db.sql, 'events')).toContain('events_p1');
      // Once that run is gone too, the partition goes.
      await db.sql`delete from dags where dag_id = 'late'`;
      expect(await dropEmptyPartition(db.sql, EVENTS, first, 1000)).toBe(true);
      expect(await partitionNames(db.sql, 'events')).not.toContain('events_p1');
    } finally {
      await other.end();
    }
  });

  it('sweeps from the default partition only rows whose run is gone, a window at a time', async () => {
    await runs(150, 152, 0);
    await db.sql`insert into events (run_id, kind) values (null, 'dag.applied')`;
    await db.sql`delete from dag_runs where id = 151`;
    let from = 0n;
    let deleted = 0;
    for (;;) {
      const r = await sweepOrphans(db.sql, EVENTS, 'events_default', from, 1);
      deleted += r.deleted;
      if (r.next === null) break;
      from = r.next;
    }
    expect(deleted).toBe(4);
    const left = await db.sql<
      { run_id: string | null; n: number }[]
    >`select run_id, count(*)::int as n from events_default group by 1 order by 1 nulls first`;
    expect(left).toEqual([
      { run_id: null, n: 1 },
      { run_id: '150', n: 4 },
      { run_id: '152', n: 4 },
    ]);
  });
});

/**
 * Runs `work` in a transaction on `sql` and keeps it open until the function it resolves is
 * called (which commits and waits for the commit).
 */
async function holdOpen(sql: Sql, work: (tx: TxSql) => Promise<void>): Promise<() => Promise<void>> {
  let commit!: () => void;
  const open = new Promise<void>((r) => (commit = r));
  let ready!: () => void;
  const done = new Promise<void>((r) => (ready = r));
  const tx = sql.begin(async (t) => {
    await work(t);
    ready();
    await open;
  });
  await done;
  return async () => {
    commit();
    await tx;
  };
}
