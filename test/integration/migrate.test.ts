import { describe, expect, it } from 'vitest';
import { loadMigrations, migrate, type Migration } from '../../src/db/migrate.js';
import { activeRuns } from '../../src/db/runs.js';
import type { Sql } from '../../src/db/sql.js';
import { databaseForFile } from '../helpers/test-database.js';

const db = databaseForFile();

describe('migrate', () => {
  it('has applied every migration to the template and is a no-op the second time', async () => {
    const all = await loadMigrations();
    const rows = await db.sql<{ id: number }[]>`select id from leoflow_migrations order by id`;
    expect(rows.map((r) => r.id)).toEqual(all.map((m) => m.id));
    expect(await migrate(db.sql)).toBe(0);
  });

  it('is safe when two processes migrate an empty database at once', async () => {
    await db.sql.unsafe('drop schema public cascade; create schema public; drop table if exists leoflow_migrations');
    const { createSql } = await import('../../src/db/sql.js');
    const a = createSql(db.url, { max: 2 });
    const b = createSql(db.url, { max: 2 });
    try {
      const counts = await Promise.all([migrate(a), migrate(b)]);
      expect(counts[0]! + counts[1]!).toBe((await loadMigrations()).length);
      // Partitions of the history tables are tables too: the list is of the rest.
      const tables = await db.sql<{ t: string }[]>`
        select c.relname as t from pg_class c join pg_namespace n on n.oid = c.relnamespace
        where n.nspname = 'public' and c.relkind in ('r', 'p') and not c.relispartition order by 1`;
      expect(tables.map((r) => r.t)).toEqual(
        [
          'agents',
          'api_tokens',
          'dag_runs',
          'dag_versions',
          'dags',
          'events',
          'external_events',
          'leoflow_install',
          'leoflow_migrations',
          'notification_attempts',
          'notifications',
          'notify_defaults',
          'replica_addresses',
          'task_cache',
          'task_cache_hits',
          'task_instances',
          'task_logs',
          'task_outputs',
          'task_waits',
          'trace_export',
        ].sort(),
      );
    } finally {
      await a.end();
      await b.end();
    }
  });
});

/** Empties the database, then applies the migrations before `id`; resolves with all of them. */
async function emptiedAndMigratedBelow(id: number): Promise<Migration[]> {
  await db.sql.unsafe('drop schema public cascade; create schema public; drop table if exists leoflow_migrations');
  const all = await loadMigrations();
  await apply(
    db.sql,
    all.filter((m) => m.id < id),
  );
  return all;
}

/** Applies these migrations as `migrate` would, each in its transaction with its row. */
async function apply(sql: Sql, migrations: Migration[]): Promise<void> {
  await sql`create table if not exists leoflow_migrations (id integer primary key, name text not null, applied_at timestamptz not null default now())`;
  for (const m of migrations) {
    await sql.begin(async (tx) => {
      await tx`insert into leoflow_migrations (id, name) values (${m.id}, ${m.name})`;
      await tx.unsafe(m.sql);
    });
  }
}

describe('migration 008 (history partitioned by owner id)', () => {
  it('migrates a database with history in it: every row kept, in the first partition, and new rows go on from there', async () => {
    const all = await emptiedAndMigratedBelow(8);
    // History as 007 left it: two runs of three tasks, their events and lines, and a DAG's event.
    await db.sql`insert into dags (dag_id, spec, source, spec_hash, max_active_runs) values ('etl', '{"tasks": []}', '', 'h', 1)`;
    await db.sql`insert into events (run_id, ti_id, kind, payload) values (null, null, 'dag.applied', '{"dag_id": "etl", "version": 1}')`;
    await db.sql`
      insert into dag_runs (dag_id, run_key, run_type, dag_version, spec, logical_date, state, ended_at)
      select 'etl', 'k' || g, 'manual', 1, '{}', now(), 'success', now() from generate_series(1, 2) g`;
    await db.sql`insert into task_instances (run_id, task_id, max_tries, executor, state) select r.id, 't' || g, 1, 'subprocess', 'success' from dag_runs r, generate_series(1, 3) g`;
    await db.sql`insert into events (run_id, ti_id, kind, payload) select run_id, id, 'ti.state', '{"to": "success"}' from task_instances`;
    await db.sql`insert into task_logs (ti_id, try_number, seq, stream, line) select t.id, 1, g, 'stdout', 'line ' || g from task_instances t, generate_series(1, 4) g`;
    const before = {
      events: await db.sql`select seq::text, run_id::text, ti_id::text, kind, payload, at from events order by seq`,
      logs: await db.sql`select ti_id::text, try_number, seq, stream, line, at from task_logs order by 1, 2, 3`,
    };

    expect(await migrate(db.sql)).toBe(all.filter((m) => m.id >= 8).length);

    expect(
      await db.sql`select seq::text, run_id::text, ti_id::text, kind, payload, at from events order by seq`,
    ).toEqual(before.events);
    expect(await db.sql`select ti_id::text, try_number, seq, stream, line, at from task_logs order by 1, 2, 3`).toEqual(
      before.logs,
    );
    const where = await db.sql<{ t: string; n: number }[]>`
      select tableoid::regclass::text as t, count(*)::int as n from events group by 1
      union all select tableoid::regclass::text, count(*)::int from task_logs group by 1 order by 1`;
    expect(where).toEqual([
      { t: 'events_default', n: 1 },
      { t: 'events_p0', n: 6 },
      { t: 'task_logs_p0', n: 24 },
    ]);
    // New history goes to the range above the old, numbered on after the old events.
    await db.sql`insert into dag_runs (dag_id, run_key, run_type, dag_version, logical_date) values ('etl', 'k3', 'manual', 1, now())`;
    const [ev] = await db.sql<{ seq: string; t: string }[]>`
      insert into events (run_id, kind) select max(id), 'run.state' from dag_runs returning seq::text, tableoid::regclass::text as t`;
    expect(ev).toEqual({ seq: '8', t: 'events_p3' });
    // A line is stored once, however often it is sent (an agent resending after a reconnect).
    await db.sql`insert into task_instances (run_id, task_id, max_tries, executor) select max(id), 't1', 1, 'subprocess' from dag_runs`;
    for (let i = 0; i < 2; i++) {
      await db.sql`insert into task_logs (ti_id, try_number, seq, stream, line) select max(id), 1, 1, 'stdout', 'again' from task_instances on conflict do nothing`;
    }
    const [lines] = await db.sql<{ n: number; t: string }[]>`
      select count(*)::int as n, min(tableoid::regclass::text) as t from task_logs where ti_id = (select max(id) from task_instances)`;
    expect(lines).toEqual({ n: 1, t: 'task_logs_p7' });
  });
});

describe('migration 009 (runs reference a DAG version)', () => {
  it('migrates a database with runs in it: every run reads the spec it was made from, and each version is stored once', async () => {
    const all = await emptiedAndMigratedBelow(9);
    // As 008 left it: `etl` applied twice, with runs of both versions each holding its copy of the
    // spec; `idle` applied once and never run.
    const spec = (dagId: string, version: number, maxActiveRuns: number) => ({
      dagId,
      maxActiveRuns,
      tasks: Array.from({ length: version + 1 }, (_, i) => ({ id: `t${i}`, dependsOn: [], retries: version })),
    });
    const v1 = spec('etl', 1, 2);
    const v2 = spec('etl', 2, 5);
    const idle = spec('idle', 1, 1);
    await db.sql`insert into dags (dag_id, spec, source, spec_hash, max_active_runs, version)
      values ('etl', ${db.sql.json(v2)}, '', 'h2', 5, 2), ('idle', ${db.sql.json(idle)}, '', 'h', 1, 1)`;
    await db.sql`
      insert into dag_runs (dag_id, run_key, run_type, dag_version, spec, logical_date, state, ended_at)
      select 'etl', 'old' || g, 'manual', 1, ${db.sql.json(v1)}, now(), 'success', now() from generate_series(1, 3) g`;
    await db.sql`
      insert into dag_runs (dag_id, run_key, run_type, dag_version, spec, logical_date)
      select 'etl', 'new' || g, 'manual', 2, ${db.sql.json(v2)}, now() from generate_series(1, 2) g`;
    const before = await db.sql<{ id: string; spec: unknown }[]>`select id::text, spec from dag_runs order by id`;

    expect(await migrate(db.sql)).toBe(all.filter((m) => m.id >= 9).length);

    const columns =
      await db.sql`select column_name from information_schema.columns where table_name = 'dag_runs' and column_name = 'spec'`;
    expect(columns).toHaveLength(0);
    const after = await db.sql<{ id: string; spec: unknown }[]>`
      select r.id::text, v.spec from dag_runs r join dag_versions v on v.dag_id = r.dag_id and v.version = r.dag_version order by r.id`;
    expect(after).toEqual(before);
    expect(await db.sql`select dag_id, version, spec, max_active_runs from dag_versions order by 1, 2`).toEqual([
      { dag_id: 'etl', version: 1, spec: v1, max_active_runs: 2 },
      { dag_id: 'etl', version: 2, spec: v2, max_active_runs: 5 },
      { dag_id: 'idle', version: 1, spec: idle, max_active_runs: 1 },
    ]);
    // The planner's read gives each active run its version's spec.
    const read = await activeRuns(db.sql, 100);
    expect(read.map((r) => [r.run_key, r.spec])).toEqual([
      ['new1', v2],
      ['new2', v2],
    ]);
  });
});
