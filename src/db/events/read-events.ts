import type { Sql } from '../sql.js';

/** One row of `events` as watchers see it, with its run's DAG (null for events of no run). */
export interface EventRow {
  seq: string;
  run_id: string | null;
  ti_id: string | null;
  dag_id: string | null;
  kind: string;
  payload: Record<string, unknown>;
  at: Date;
}

/** Which events a watcher wants: one run's, one DAG's runs', or every run's (all null). */
export interface EventFilter {
  runId?: string;
  dagId?: string;
}

/** The sequence that numbers `events` (the identity's, named by Postgres). */
export async function eventSeqName(sql: Sql): Promise<string> {
  const [s] = await sql<{ name: string }[]>`select pg_get_serial_sequence('events', 'seq') as name`;
  return s!.name;
}

/**
 * The highest seq handed out so far (taken by a writer, committed or not). Read in a statement
 * of its own, before the snapshot of `eventsAfter`: every writer holding a seq up to it had its
 * transaction id by then (migration 011), so that snapshot lists it if it is still open.
 */
export async function lastSeqTaken(sql: Sql, seqName: string): Promise<bigint> {
  const [v] = await sql.unsafe<{ last: string }[]>(`select (case when is_called then last_value else last_value - 1 end)::text as last from ${seqName}`);
  return BigInt(v!.last);
}

/**
 * The committed events with `after < seq <= upTo` (every run's), in seq order, and the
 * transactions open at this statement's snapshot: until they have ended, a seq missing in the
 * range may still come.
 */
export async function eventsAfter(sql: Sql, after: bigint, upTo: bigint): Promise<{ rows: EventRow[]; open: string[] }> {
  const [snap] = await sql<{ open: string[] }[]>`select coalesce(array_agg(x::text), '{}') as open from pg_snapshot_xip(pg_current_snapshot()) x`;
  // A second statement has a later snapshot: it sees at least what the first one's open list covers.
  const rows = await readEvents(sql, {}, after, upTo, Number(upTo - after));
  return { rows, open: snap!.open };
}

/** Whether any of these transactions is still open. */
export async function anyOpen(sql: Sql, xids: string[]): Promise<boolean> {
  if (xids.length === 0) return false;
  const [r] = await sql<{ open: boolean }[]>`select exists (select 1 from unnest(${xids}::text[]) x where pg_xact_status(x::xid8) = 'in progress') as open`;
  return r!.open;
}

/** The events of `filter` with `after < seq <= upTo`, in seq order, at most `limit`. */
export async function readEvents(sql: Sql, filter: EventFilter, after: bigint, upTo: bigint, limit: number): Promise<EventRow[]> {
  const runId = filter.runId ?? null;
  const dagId = filter.dagId ?? null;
  return sql<EventRow[]>`
    select e.seq::text as seq, e.run_id::text as run_id, e.ti_id::text as ti_id,
           coalesce(r.dag_id, e.payload->>'dag_id') as dag_id, e.kind, e.payload, e.at
    from events e left join dag_runs r on r.id = e.run_id
    where e.seq > ${after.toString()}::bigint and e.seq <= ${upTo.toString()}::bigint
      and (${runId}::bigint is null or e.run_id = ${runId}::bigint)
      and (${dagId}::text is null or coalesce(r.dag_id, e.payload->>'dag_id') = ${dagId}::text)
    order by e.seq
    limit ${limit}`;
}
