import { ACTIVE_RUN_STATES } from '../core/states.js';
import { inlineLiterals } from './inline-literals.js';
import type { Sql } from './sql.js';

/** The ids of a DAG's runs that have not ended, oldest first. */
export async function activeRunsOfDag(sql: Sql, dagId: string): Promise<string[]> {
  const rows = await sql<{ id: string }[]>`
    select id from dag_runs where dag_id = ${dagId} and state in (${inlineLiterals(sql, ACTIVE_RUN_STATES)})
      order by id`;
  return rows.map((r) => r.id);
}
