import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { removeRuns, removeRunsIn } from '../../src/db/history/remove-runs.js';
import { daysAgo, pastRun } from '../helpers/history-fixtures.js';
import { endedRun } from '../helpers/ended-run.js';
import { quietLogWriter } from '../helpers/quiet-log-writer.js';
import { createTestDatabase, type TestDatabase } from '../helpers/test-database.js';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  await db.sql`drop trigger if exists slow_log_line on task_logs`;
  await db.drop();
});

const now = new Date();
const TOKEN = '00000000-0000-4000-8000-000000000001';

describe('a log line written while db clean removes its task instance', () => {
  it('is removed with it, or not written: never left behind', async () => {
    await endedRun(db.sql, now, { id: 1, dagId: 'a', days: 3, tiIds: [10], lines: 1 });
    await db.sql`update task_instances set attempt_token = ${TOKEN} where id = 10`;
    // The line's INSERT reads its task instance (the fence), then takes a second before it is
    // stored and committed: the clean removes the run in that second.
    await db.sql.unsafe(`
      create or replace function slow_log_line() returns trigger language plpgsql as $$
      begin perform pg_sleep(1); return new; end $$;
      create trigger slow_log_line before insert on task_logs for each row execute function slow_log_line();`);
    const writer = quietLogWriter(db.sql);
    try {
      writer.write('10', 1, TOKEN, 'stdout', 'late line', 100);
      const written = writer.flush();
      await new Promise((r) => setTimeout(r, 300));
      const removed = await removeRuns(db.sql, ['1'], {});
      await written;
      expect(removed.runs).toBe(1);
      const [left] = await db.sql<{ n: number }[]>`select count(*)::int as n from task_logs where ti_id = 10`;
      expect(left!.n).toBe(0);
    } finally {
      await db.sql`drop trigger if exists slow_log_line on task_logs`;
      await writer.close();
    }
  });

  it('is not stored when the clean removed its task instance first and has not yet committed', async () => {
    await endedRun(db.sql, now, { id: 2, dagId: 'a', days: 3, tiIds: [20], lines: 1 });
    await db.sql`update task_instances set attempt_token = ${TOKEN} where id = 20`;
    const writer = quietLogWriter(db.sql);
    try {
      let written: Promise<void> | undefined;
      await db.sql.begin(async (tx) => {
        expect((await removeRunsIn(tx, ['2'], {})).runs).toBe(1);
        writer.write('20', 1, TOKEN, 'stdout', 'late line', 100);
        written = writer.flush();
        await new Promise((r) => setTimeout(r, 300));
      });
      await written;
      const [left] = await db.sql<{ n: number }[]>`select count(*)::int as n from task_logs where ti_id = 20`;
      expect(left!.n).toBe(0);
    } finally {
      await writer.close();
    }
  });
});
