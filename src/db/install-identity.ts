import type { Sql } from './sql.js';

/** This database's install id (made by migration 020, never changed): 32 hex characters. */
export async function installIdentity(sql: Sql): Promise<string> {
  const [row] = await sql<{ id: string }[]>`select id from leoflow_install`;
  if (!row) throw new Error('the database has no install id (leoflow_install is empty): was migration 020 applied?');
  return row.id;
}
