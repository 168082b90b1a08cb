import type { Sql } from './sql.js';

/** A round trip to the database: resolves when it answers. */
export async function ping(sql: Sql): Promise<void> {
  await sql`select 1`;
}
