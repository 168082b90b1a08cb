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

/** The sequence that numbers `events` (migration 011). */
export async function eventSeqName(sql: Sql): Promise<string> {
  const [s] = await sql<{ name: string }[]>`select pg_get_serial_sequence('events', 'seq') as name`;
  return s?.name ?? 'events_seq';
}

/**
 * The highest seq handed out so far (taken by a writer, committed or not). Read in a statement
 * of its own, before `eventsAfter`: every writer holding a seq up to it had its transaction id
 * by then (migration 011 numbers seq after taking it), so `eventsAfter` counts it among the open.
 */
export async function lastSeqTaken(sql: Sql, seqName: string): Promise<bigint> {
  const [v] = await sql.unsafe<{ last: string }[]>(
    `select (case when is_called then last_value else last_value - 1 end)::text as last from ${seqName}`,
  );
  return BigInt(v!.last);
}

/**
 * The committed events with `after < seq <= upTo` (every run's), in seq order, and the
 * transactions that may still commit a seq in the range: those open at this statement's snapshot,
 * and those given an id after it was taken (a snapshot lists only ids below its xmax; such a
 * writer may already hold a seq). The second are bounded by an id this statement takes for
 * itself, after the snapshot: every writer that took a seq before the call has a smaller one.
 */
export async function eventsAfter(
  sql: Sql,
  after: bigint,
  upTo: bigint,
): Promise<{ rows: EventRow[]; open: string[] }> {
  const [snap] = await sql<{ open: string[] }[]>`
    select array(
      select x::text from pg_snapshot_xip(q.s) x
      union all
      select g::text from generate_series(pg_snapshot_xmax(q.s)::text::bigint, pg_current_xact_id()::text::bigint - 1) g
    ) as open
    from (select pg_current_snapshot() as s) q`;
  // A second statement has a later snapshot: it sees every writer the first one does not list.
  const rows = await readEvents(sql, {}, after, upTo, Number(upTo - after));
  return { rows, open: snap!.open };
}

/**
 * Whether any of these transactions may still be open to a snapshot taken now: listed by it, or
 * at or above its xmax. Asked of a snapshot, not of `pg_xact_status`: a transaction is recorded
 * committed a moment before snapshots stop listing it, and a read then would miss its rows.
 */
export async function anyOpen(sql: Sql, xids: string[]): Promise<boolean> {
  if (xids.length === 0) return false;
  const [r] = await sql<{ open: boolean }[]>`
    select exists (
      select 1 from unnest(${xids}::text[]) x, (select pg_current_snapshot() as c) q
      where x::xid8 >= pg_snapshot_xmax(q.c) or x::xid8 in (select pg_snapshot_xip(q.c))
    ) as open`;
  return r!.open;
}

/** The events of `filter` with `after < seq <= upTo`, in seq order, at most `limit`. */
export async function readEvents(
  sql: Sql,
  filter: EventFilter,
  after: bigint,
  upTo: bigint,
  limit: number,
): Promise<EventRow[]> {
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
