import { randomBytes } from 'node:crypto';
import { inject } from 'vitest';
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
