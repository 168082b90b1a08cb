import type { RunStateName, TiState } from '../../src/core/states.js';
import type { Sql } from '../../src/db/sql.js';

const DAY_MS = 86_400_000;

/** A time `days` before `now` (fractions allowed). */
export const daysAgo = (now: Date, days: number) => new Date(now.getTime() - days * DAY_MS);

/**
 * Replaces the range partitions of the history tables with the ones given, as boundaries of owner
 * ids (`[b0, b1)`, `[b1, b2)`, …, plus `(MINVALUE, b0)`), so a test knows which partition each of
 * its rows goes to. Only on an empty history; the default partitions stay.
 */
export async function layOutPartitions(sql: Sql, bounds: { events: number[]; task_logs: number[] }): Promise<void> {
  for (const [table, bs] of Object.entries(bounds)) {
    const parts = await sql<{ name: string }[]>`
      select c.relname as name from pg_inherits i join pg_class c on c.oid = i.inhrelid
      where i.inhparent = ${table}::regclass and pg_get_expr(c.relpartbound, c.oid) <> 'DEFAULT'`;
    for (const p of parts) await sql.unsafe(`drop table ${p.name}`);
    await sql.unsafe(`create table ${table}_p0 partition of ${table} for values from (minvalue) to (${bs[0]})`);
    for (let i = 0; i + 1 < bs.length; i++) {
      await sql.unsafe(
        `create table ${table}_p${bs[i]} partition of ${table} for values from (${bs[i]}) to (${bs[i + 1]})`,
      );
    }
  }
}

export interface PastRun {
  id: number;
  dagId: string;
  state: RunStateName;
  createdAt: Date;
  /** Required for a finished run. */
  endedAt?: Date;
  /** Ids of its task instances (one task each): their log lines' partitions. */
  tiIds: number[];
  /** Log lines per task instance (default 3). */
  lines?: number;
}

/**
 * A run written as it would be after its life (its DAG created if need be): the run, a task
 * instance per id, the events a run of that size records (its moves and each task's three), and
 * log lines. Ids are given, so the test places its rows in known partitions.
 */
export async function pastRun(sql: Sql, r: PastRun): Promise<void> {
  const finished = r.state === 'success' || r.state === 'failed' || r.state === 'cancelled';
  const tiState: TiState =
    r.state === 'running'
      ? 'running'
      : r.state === 'queued'
        ? 'none'
        : r.state === 'success'
          ? 'success'
          : r.state === 'failed'
            ? 'failed'
            : 'cancelled';
  await fixtureDag(sql, r.dagId);
  await sql`
    insert into dag_runs (id, dag_id, run_key, run_type, dag_version, logical_date, state, created_at, started_at, ended_at)
    overriding system value
    values (${r.id}, ${r.dagId}, ${`k${r.id}`}, 'manual', 1, ${r.createdAt}, ${r.state}, ${r.createdAt},
            ${r.state === 'queued' ? null : r.createdAt}, ${finished ? r.endedAt! : null})`;
  for (const [i, tiId] of r.tiIds.entries()) {
    await sql`
      insert into task_instances (id, run_id, task_id, try_number, max_tries, state, executor, ended_at)
      overriding system value
      values (${tiId}, ${r.id}, ${`t${i}`}, 1, 1, ${tiState}, 'subprocess', ${finished ? r.endedAt! : null})`;
    await sql`
      insert into events (run_id, ti_id, kind, payload, at)
      select ${r.id}, ${tiId}, 'ti.state', jsonb_build_object('task_id', ${`t${i}`}::text, 'to', s), ${r.createdAt}
      from unnest(array['scheduled', 'queued', 'running']) s`;
    await sql`
      insert into task_logs (ti_id, try_number, seq, stream, line, at)
      select ${tiId}, 1, g, 'stdout', 'line ' || g, ${r.createdAt} from generate_series(1, ${r.lines ?? 3}) g`;
  }
  await sql`
    insert into events (run_id, ti_id, kind, payload, at)
    values (${r.id}, null, 'run.state', '{"to": "queued"}', ${r.createdAt})`;
}

/** What is stored of one run: the run row, its task instances, events and log lines. */
export async function storedOf(
  sql: Sql,
  runId: number,
  tiIds: number[],
): Promise<{ run: number; tis: number; events: number; logs: number }> {
  const [row] = await sql<{ run: number; tis: number; events: number; logs: number }[]>`
    select (select count(*) from dag_runs where id = ${runId})::int as run,
      (select count(*) from task_instances where run_id = ${runId})::int as tis,
      (select count(*) from events where run_id = ${runId})::int as events,
      (select count(*) from task_logs where ti_id = any(${tiIds}::bigint[]))::int as logs`;
  return row!;
}

/** The names of a history table's partitions, lowest range first, the default last. */
export async function partitionNames(sql: Sql, table: 'events' | 'task_logs'): Promise<string[]> {
  const rows = await sql<{ name: string }[]>`
    select c.relname as name from pg_inherits i join pg_class c on c.oid = i.inhrelid
    where i.inhparent = ${table}::regclass
    order by pg_get_expr(c.relpartbound, c.oid) = 'DEFAULT', c.relname`;
  return rows.map((r) => r.name);
}

/**
 * Many finished runs of one DAG, written with a few set-based statements (ids from the sequences,
 * in creation order, as the server makes them): `runs` runs a second apart from `daysBack` days
 * ago, each with `tisPerRun` task instances, 3 events and 3 log lines a task instance and one
 * event a run.
 */
export async function bulkPastRuns(
  sql: Sql,
  o: { dagId: string; runs: number; tisPerRun: number; daysBack: number },
): Promise<void> {
  await fixtureDag(sql, o.dagId);
  await sql`
    insert into dag_runs (dag_id, run_key, run_type, dag_version, logical_date, state, created_at, started_at, ended_at)
    select ${o.dagId}, 'bulk' || g, 'manual', 1, x.t, 'success', x.t, x.t, x.t
    from generate_series(1, ${o.runs}::int) g, lateral (select now() - ${o.daysBack}::int * interval '1 day' + g * interval '1 second' as t) x
    order by g`;
  await sql`
    insert into task_instances (run_id, task_id, try_number, max_tries, state, executor, ended_at)
    select r.id, 't' || i, 1, 1, 'success', 'subprocess', r.ended_at
    from dag_runs r, generate_series(1, ${o.tisPerRun}::int) i where r.dag_id = ${o.dagId} order by r.id, i`;
  await sql`
    insert into events (run_id, ti_id, kind, payload, at)
    select t.run_id, t.id, 'ti.state', jsonb_build_object('task_id', t.task_id, 'to', s), t.ended_at
    from task_instances t join dag_runs r on r.id = t.run_id, unnest(array['scheduled', 'queued', 'running']) s
    where r.dag_id = ${o.dagId}`;
  await sql`
    insert into events (run_id, ti_id, kind, payload, at)
    select id, null, 'run.state', '{"to": "queued"}', created_at from dag_runs where dag_id = ${o.dagId}`;
  await sql`
    insert into task_logs (ti_id, try_number, seq, stream, line, at)
    select t.id, 1, g, 'stdout', 'line ' || g, t.ended_at
    from task_instances t join dag_runs r on r.id = t.run_id, generate_series(1, 3) g where r.dag_id = ${o.dagId}`;
}

/** The DAG past runs belong to, with the version 1 they name, unless it is there already. */
async function fixtureDag(sql: Sql, dagId: string): Promise<void> {
  await sql`
    insert into dags (dag_id, spec, source, spec_hash, max_active_runs)
    values (${dagId}, '{"tasks": []}', '', 'fixture', 1000) on conflict do nothing`;
  await sql`
    insert into dag_versions (dag_id, version, spec, max_active_runs)
    values (${dagId}, 1, '{"tasks": []}', 1000) on conflict do nothing`;
}
