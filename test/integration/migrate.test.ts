import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadMigrations, migrate } from '../../src/db/migrate.js';
import { createTestDatabase, type TestDatabase } from '../helpers/test-database.js';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  await db.drop();
});

describe('migrate', () => {
  it('has applied every migration to the template and is a no-op the second time', async () => {
    const all = await loadMigrations();
    const rows = await db.sql<{ id: number }[]>`select id from leoflow_migrations order by id`;
    expect(rows.map((r) => r.id)).toEqual(all.map((m) => m.id));
    expect(await migrate(db.sql)).toBe(0);
  });

  it('is safe when two processes migrate an empty database at once', async () => {
    await db.sql.unsafe('drop schema public cascade; create schema public; drop table if exists leoflow_migrations');
    const { createSql } = await import('../../src/db/sql.js');
    const a = createSql(db.url, { max: 2 });
    const b = createSql(db.url, { max: 2 });
    try {
      const counts = await Promise.all([migrate(a), migrate(b)]);
      expect(counts[0]! + counts[1]!).toBe((await loadMigrations()).length);
      const tables = await db.sql<{ t: string }[]>`
        select table_name as t from information_schema.tables where table_schema = 'public' order by 1`;
      expect(tables.map((r) => r.t)).toEqual(
        ['agents', 'dag_runs', 'dags', 'events', 'leoflow_migrations', 'task_instances', 'task_logs'].sort(),
      );
    } finally {
      await a.end();
      await b.end();
    }
  });
});
