import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { settledSeq } from '../../src/db/events/settled-seq.js';
import type { Sql } from '../../src/db/sql.js';
import { createTestDatabase, type TestDatabase } from '../helpers/test-database.js';

/**
 * Where a watch that follows a read starts (GetRun's and ListRuns' watch_seq): a seq is taken at
 * insert, not at commit, so while a writer holds seq N open another may commit N+1. The highest
 * committed seq (what ListRuns answered before) is then past an event still to come, and a watch
 * from it would never see that event. settledSeq waits for the writer to end.
 */

let db: TestDatabase;
let pool: Sql;

beforeAll(async () => {
  db = await createTestDatabase();
  pool = postgres(db.url, { max: 4, types: {}, onnotice: () => {} }) as unknown as Sql;
});

afterAll(async () => {
  await pool?.end({ timeout: 5 });
  await db?.drop();
});

async function insert(sql: Sql | postgres.ReservedSql): Promise<bigint> {
  const [r] = await (sql as Sql)<{ seq: string }[]>`
    insert into events (run_id, ti_id, kind, payload) values (1, null, 'run.state', '{"to": "running"}')
    returning seq::text as seq`;
  return BigInt(r!.seq);
}

describe('settledSeq', () => {
  it('is the last seq taken, once no writer can still commit a seq at or under it', async () => {
    const quiet = await settledSeq(pool);
    const committed = await insert(pool);
    expect(await settledSeq(pool)).toBe(committed);
    expect(quiet).toBeLessThan(committed);

    const holder = await (pool as unknown as postgres.Sql).reserve();
    try {
      await holder`begin`;
      const held = await insert(holder);
      const after = await insert(pool);
      expect(after).toBeGreaterThan(held);
      // The highest committed seq is `after`, past `held`, which has not committed yet.
      const [max] = await pool<{ max: string }[]>`select max(seq)::text as max from events`;
      expect(BigInt(max!.max)).toBe(after);
      let settled: bigint | null | undefined;
      const p = settledSeq(pool).then((s) => (settled = s));
      await new Promise((r) => setTimeout(r, 300));
      expect(settled).toBeUndefined();
      await holder`commit`;
      await p;
      expect(settled).toBe(after);
      const [seen] = await pool<{ n: number }[]>`select count(*)::int as n from events where seq <= ${String(after)}`;
      expect(seen!.n).toBe(3);
    } finally {
      holder.release();
    }
  });

  it('gives up with null when no longer wanted while a writer is open', async () => {
    const holder = await (pool as unknown as postgres.Sql).reserve();
    try {
      await holder`begin`;
      await insert(holder);
      let wanted = true;
      const p = settledSeq(pool, () => wanted);
      await new Promise((r) => setTimeout(r, 100));
      wanted = false;
      expect(await p).toBeNull();
      await holder`rollback`;
    } finally {
      holder.release();
    }
  });
});
