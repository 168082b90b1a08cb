import { TERMINAL_RUN_STATES } from '../../core/states.js';
import { inlineLiterals } from '../inline-literals.js';
import type { Sql } from '../sql.js';

/**
 * For `db clean --keep-last N`: per DAG (one, or all), the id of its N-th latest finished run, from
 * which on its runs are kept ('0' when it has fewer: all of them are). One backward probe of
 * `dag_runs_dag_created` per DAG, read once before a clean: a run that ends during the clean only
 * adds to the kept ones, so each DAG still has its N latest finished runs when the clean is done.
 */
export async function keptRunsFrom(sql: Sql, keepLast: number, dagId?: string): Promise<Map<string, string>> {
  const rows = await sql<{ dag_id: string; from: string }[]>`
    select d.dag_id, coalesce((
      select r.id from dag_runs r
      where r.dag_id = d.dag_id and r.state in (${inlineLiterals(sql, TERMINAL_RUN_STATES)})
      order by r.id desc offset ${keepLast - 1} limit 1), 0)::text as from
    from dags d ${dagId === undefined ? sql`` : sql`where d.dag_id = ${dagId}`}`;
  return new Map(rows.map((r) => [r.dag_id, r.from]));
}
