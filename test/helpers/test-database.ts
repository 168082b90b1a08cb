import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, beforeEach, inject } from 'vitest';
import { createSql, type Sql } from '../../src/db/sql.js';

export interface TestDatabase {
  url: string;
  name: string;
  sql: Sql;
  drop(): Promise<void>;
}

/** A fresh database, copied from the migrated template, for one test file. */
export async function createTestDatabase(): Promise<TestDatabase> {
  const adminUrl = inject('pgAdminUrl');
  const template = inject('pgTemplate');
  const name = `leoflow_t_${randomBytes(5).toString('hex')}`;
  const admin = createSql(adminUrl, { max: 1 });
  for (let attempt = 0; ; attempt++) {
    try {
      await admin.unsafe(`create database "${name}" template "${template}"`);
      break;
    } catch (err) {
      // 55006: another file is copying the template at this instant; try again shortly.
      if ((err as { code?: string }).code !== '55006' || attempt > 50) throw err;
      await new Promise((r) => setTimeout(r, 50 + Math.random() * 100));
    }
  }
  const u = new URL(adminUrl);
  u.pathname = `/${name}`;
  const url = u.toString();
  const sql = createSql(url, { max: 10, applicationName: 'leoflow-test' });
  return {
    url,
    name,
    sql,
    async drop() {
      await sql.end({ timeout: 5 });
      await admin.unsafe(`drop database if exists "${name}" with (force)`);
      await admin.end();
    },
  };
}

/**
 * The database of one test file: made beforeAll, dropped afterAll. Its fields are read through at
 * each use, so `db.sql` reads as before in the file's tests and helpers. With `emptyEach`, each
 * test starts with no DAGs (so no runs, TIs or attempts) and no events: for the phases and readers
 * that look at every row of the database.
 */
export function databaseForFile(o: { emptyEach?: boolean } = {}): TestDatabase {
  let made: TestDatabase | undefined;
  const db = (): TestDatabase => {
    if (!made) throw new Error("the file's test database is made in beforeAll: use it in a hook or a test");
    return made;
  };
  beforeAll(async () => {
    made = await createTestDatabase();
  });
  afterAll(async () => {
    await made?.drop();
  });
  if (o.emptyEach)
    beforeEach(async () => {
      await db().sql`delete from dags`;
      await db().sql`delete from events`;
    });
  return {
    get url() {
      return db().url;
    },
    get name() {
      return db().name;
    },
    get sql() {
      return db().sql;
    },
    drop: () => db().drop(),
  };
}
