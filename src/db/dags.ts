import { actorPayload, type WriteActor } from '../core/actor.js';
import { createHash } from 'node:crypto';
import type { DagSpec } from '../core/dag-spec.js';
import { firstFireTimeAtOrAfter, latestFireTime } from '../core/schedule.js';
import { EVENT_KIND, eventKind, insertEvents } from './events/record-events.js';
import type { Sql, TxSql } from './sql.js';

export interface DagRow {
  dag_id: string;
  spec: DagSpec;
  source: string;
  spec_hash: string;
  schedule: string | null;
  timezone: string;
  catchup: boolean;
  start_date: Date | null;
  max_active_runs: number;
  paused: boolean;
  version: number;
  next_run_at: Date | null;
  created_at: Date;
  updated_at: Date;
}

export type ApplyOutcome = 'created' | 'updated' | 'unchanged';

function specHash(spec: DagSpec): string {
  return createHash('sha256').update(JSON.stringify(spec)).digest('hex');
}

/**
 * When the next scheduled run is due: with catchup, the first fire time since start_date (or
 * since now for a DAG without one); without, the latest fire time already passed, so the
 * current interval runs once and missed ones are not replayed.
 */
export function initialNextRunAt(spec: DagSpec, now: Date): Date | null {
  if (!spec.schedule) return null;
  const start = spec.startDate ? new Date(spec.startDate) : now;
  if (spec.catchup || start.getTime() > now.getTime())
    return firstFireTimeAtOrAfter(spec.schedule, spec.timezone, start);
  return (
    latestFireTime(spec.schedule, spec.timezone, start, now) ??
    firstFireTimeAtOrAfter(spec.schedule, spec.timezone, now)
  );
}

/**
 * Stores a validated DAG and its version (`dag_versions`, what runs are made from). The version
 * goes up only when the spec changed; the schedule's next run is recomputed only when the
 * schedule itself changed, so re-applying a file is a no-op.
 */
export async function upsertDag(
  sql: Sql,
  spec: DagSpec,
  source: string,
  now = new Date(),
  by?: WriteActor,
): Promise<{ dag: DagRow; outcome: ApplyOutcome }> {
  const hash = specHash(spec);
  return sql.begin(async (tx) => {
    const [existing] = await tx<DagRow[]>`select * from dags where dag_id = ${spec.dagId} for update`;
    if (existing && existing.spec_hash === hash) return { dag: existing, outcome: 'unchanged' as const };
    const scheduleChanged =
      !existing ||
      existing.schedule !== spec.schedule ||
      existing.timezone !== spec.timezone ||
      existing.catchup !== spec.catchup ||
      (existing.start_date?.toISOString() ?? null) !== (spec.startDate ? new Date(spec.startDate).toISOString() : null);
    const nextRunAt = scheduleChanged ? initialNextRunAt(spec, now) : existing!.next_run_at;
    // The version is written by the statement that bumps it: a run made from it (createRun)
    // finds it whatever commits first.
    const [dag] = await tx<DagRow[]>`
      with d as (
      insert into dags (dag_id, spec, source, spec_hash, schedule, timezone, catchup, start_date,
                        max_active_runs, next_run_at)
      values (${spec.dagId}, ${tx.json(spec as never)}, ${source}, ${hash}, ${spec.schedule}, ${spec.timezone},
              ${spec.catchup}, ${spec.startDate}, ${spec.maxActiveRuns}, ${nextRunAt})
      on conflict (dag_id) do update set
        spec = excluded.spec, source = excluded.source, spec_hash = excluded.spec_hash,
        schedule = excluded.schedule, timezone = excluded.timezone, catchup = excluded.catchup,
        start_date = excluded.start_date, max_active_runs = excluded.max_active_runs,
        next_run_at = excluded.next_run_at, version = dags.version + 1, updated_at = now()
      returning *),
      v as (
        insert into dag_versions (dag_id, version, spec, max_active_runs)
        select dag_id, version, spec, max_active_runs from d)
      select * from d`;
    await insertEvents(
      tx,
      tx`values (null, null, ${eventKind(tx, EVENT_KIND.dagApplied)},
        ${tx.json({ dag_id: spec.dagId, version: dag!.version, ...actorPayload(by) } as never)})`,
    );
    return { dag: dag!, outcome: existing ? ('updated' as const) : ('created' as const) };
  });
}

export async function getDag(sql: Sql | TxSql, dagId: string): Promise<DagRow | null> {
  const [row] = await sql<DagRow[]>`select * from dags where dag_id = ${dagId}`;
  return row ?? null;
}

/** The columns of a DAG the API shows (`Dag` in types.proto), and no others: not its file's text
 *  (`source`, up to 1 MB), which no response carries. */
export const DAG_VIEW_COLUMNS = [
  'dag_id',
  'spec',
  'schedule',
  'catchup',
  'max_active_runs',
  'paused',
  'version',
  'updated_at',
  'next_run_at',
] as const;

/** A DAG as the API shows it. */
export type DagView = Pick<DagRow, (typeof DAG_VIEW_COLUMNS)[number]>;

export async function getDagView(sql: Sql | TxSql, dagId: string): Promise<DagView | null> {
  const [row] = await sql<DagView[]>`select ${sql(DAG_VIEW_COLUMNS)} from dags where dag_id = ${dagId}`;
  return row ?? null;
}

export async function dagExists(sql: Sql | TxSql, dagId: string): Promise<boolean> {
  const [row] = await sql`select 1 from dags where dag_id = ${dagId}`;
  return row !== undefined;
}

export async function listDags(sql: Sql): Promise<DagView[]> {
  return sql<DagView[]>`select ${sql(DAG_VIEW_COLUMNS)} from dags order by dag_id`;
}

export async function setDagPaused(sql: Sql, dagId: string, paused: boolean): Promise<DagView | null> {
  const [row] = await sql<DagView[]>`
    update dags set paused = ${paused}, updated_at = now() where dag_id = ${dagId} returning ${sql(DAG_VIEW_COLUMNS)}`;
  return row ?? null;
}

/** Scheduled, unpaused DAGs whose next run is due. */
export async function dueScheduledDags(sql: Sql, now: Date): Promise<DagRow[]> {
  return sql<DagRow[]>`
    select * from dags
    where schedule is not null and not paused and next_run_at is not null and next_run_at <= ${now}
    order by next_run_at limit 100`;
}

/** Moves a DAG's next run forward, guarded by the value it was read with (a second leader's
 *  identical move then updates nothing). */
export async function advanceNextRunAt(tx: TxSql, dagId: string, from: Date, to: Date | null): Promise<boolean> {
  const rows = await tx`update dags set next_run_at = ${to} where dag_id = ${dagId} and next_run_at = ${from}`;
  return rows.count === 1;
}
