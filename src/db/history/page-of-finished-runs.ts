import { TERMINAL_RUN_STATES } from '../../core/states.js';
import { inlineLiterals } from '../inline-literals.js';
import type { Sql } from '../sql.js';

export interface FinishedRunsQuery {
  /** Runs that ended (success, failed, cancelled) before this time; absent: whenever they ended. */
  endedBefore?: Date;
  /** Only this DAG's runs (by its index), when given. */
  dagId?: string;
  /** Runs with an id above this one ('0' to start). */
  after: string;
  /** Runs looked at per page. */
  scan: number;
  /** A page stops before the run that would take its task instances past this (it has one run at least). */
  maxTis: number;
  /** Per DAG, the run id from which on its runs are kept (`keptRunsFrom`); a DAG absent from it keeps every run. */
  keptFrom?: Map<string, string>;
}

export interface FinishedRunsPage {
  /** The runs found, in id order. */
  ids: string[];
  /** Their task instances, all told. */
  tis: number;
  /** The id to read on from; null when no run further on can match. */
  next: string | null;
}

/**
 * A page of finished runs that ended before a time, in id order. Ids follow creation, and a run
 * made at or after `endedBefore` cannot have ended before it (its end is written by a later
 * transaction than the one that made it, and both times are the database's clock), so the
 * reading stops at the first such run: a page costs the runs kept below that point (those not
 * finished, or ended since), not the whole table. Reads only; the caller removes or counts.
 */
export async function pageOfFinishedRuns(sql: Sql, q: FinishedRunsQuery): Promise<FinishedRunsPage> {
  const before = q.endedBefore ?? null;
  const kept = q.keptFrom ? [...q.keptFrom] : null;
  const rows = await sql<{ id: string; young: boolean; finished: boolean; tis: number }[]>`
    select r.id, coalesce(r.created_at >= ${before}::timestamptz, false) as young,
      (r.state in (${inlineLiterals(sql, TERMINAL_RUN_STATES)}) and coalesce(r.ended_at < ${before}::timestamptz, true)
        ${kept === null ? sql`` : sql`and r.id < coalesce(k.from_id, 0)`}) as finished,
      (select count(*) from task_instances t where t.run_id = r.id)::int as tis
    from dag_runs r
    ${
      kept === null
        ? sql``
        : sql`left join unnest(${kept.map(([d]) => d)}::text[], ${kept.map(([, f]) => f)}::bigint[]) k(dag_id, from_id)
            on k.dag_id = r.dag_id`
    }
    where r.id > ${q.after}::bigint ${q.dagId === undefined ? sql`` : sql`and r.dag_id = ${q.dagId}`}
    order by r.id
    limit ${q.scan}`;
  const page: FinishedRunsPage = { ids: [], tis: 0, next: rows.length < q.scan ? null : rows.at(-1)!.id };
  for (const r of rows) {
    if (r.young) {
      page.next = null;
      break;
    }
    if (!r.finished) continue;
    if (page.ids.length > 0 && page.tis + r.tis > q.maxTis) {
      page.next = String(BigInt(r.id) - 1n);
      break;
    }
    page.ids.push(r.id);
    page.tis += r.tis;
  }
  return page;
}
