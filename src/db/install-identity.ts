import { createHash } from 'node:crypto';
import type { Sql } from './sql.js';

/**
 * This install's id, 32 hex characters: a hash of the random id migration 020 made, the
 * database's name and the cluster's system identifier. The random id alone would be shared by a
 * database cloned from another (`createdb -T`) or restored from its dump; the name tells clones in
 * one Postgres apart, the system identifier copies on another server. A failover to a physical
 * replica keeps all three, so the new primary's replicas own the same pods.
 */
export async function installIdentity(sql: Sql): Promise<string> {
  const [row] = await sql<{ id: string; db: string }[]>`select id, current_database() as db from leoflow_install`;
  if (!row) throw new Error('the database has no install id (leoflow_install is empty): was migration 020 applied?');
  // pg_control_system() is open to every role on current servers; where it is not, the name must do.
  const system = await sql<{ s: string }[]>`select system_identifier::text as s from pg_control_system()`.then(
    (r) => r[0]?.s ?? '',
    () => '',
  );
  return createHash('sha256')
    .update(JSON.stringify([row.id, row.db, system]))
    .digest('hex')
    .slice(0, 32);
}
