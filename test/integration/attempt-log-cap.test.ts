import pino from 'pino';
import { describe, expect, it } from 'vitest';
import { createLogWriter } from '../../src/db/log-writer.js';
import { daysAgo, pastRun } from '../helpers/history-fixtures.js';
import { databaseForFile } from '../helpers/test-database.js';

/**
 * Issue 38: one held attempt stored 100,001 log lines; nothing bounded an attempt's output. The
 * writer keeps the first N lines (LIMITS.attemptLogLines), puts one line saying so in place of the
 * next, and drops the rest, judged by seq, so lines sent again after a reconnect count the same.
 */

const db = databaseForFile();

const TOKEN = '00000000-0000-4000-8000-000000000002';

describe("an attempt's log", () => {
  it('holds at most its limit of lines, then one line saying so, and nothing after, whichever way lines come', async () => {
    await pastRun(db.sql, {
      id: 1,
      dagId: 'a',
      state: 'running',
      createdAt: daysAgo(new Date(), 0),
      tiIds: [10],
      lines: 0,
    });
    await db.sql`update task_instances set attempt_token = ${TOKEN}, try_number = 1 where id = 10`;
    const writer = createLogWriter(db.sql, pino({ level: 'silent' }), {
      flushMs: 60_000,
      maxBatch: 1000,
      maxLinesPerAttempt: 50,
    });
    try {
      // An agent's numbered lines, then the same again (a reconnect), then more.
      for (let seq = 1; seq <= 80; seq++) writer.write('10', 1, TOKEN, 'stdout', `line ${seq}`, seq);
      for (let seq = 40; seq <= 60; seq++) writer.write('10', 1, TOKEN, 'stdout', `line ${seq}`, seq);
      await writer.flush();
      const rows = await db.sql<
        { seq: number; stream: string; line: string }[]
      >`select seq, stream, line from task_logs where ti_id = 10 order by seq`;
      expect(rows).toHaveLength(51);
      expect(rows[49]).toEqual({ seq: 50, stream: 'stdout', line: 'line 50' });
      expect(rows[50]).toEqual({
        seq: 51,
        stream: 'system',
        line: "[output cut: an attempt's log holds at most 50 lines; the rest is not stored]",
      });
    } finally {
      await writer.close();
    }
  });
});
