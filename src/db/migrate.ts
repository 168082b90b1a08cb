import { readdir, readFile } from 'node:fs/promises';
import type { Logger } from 'pino';
import type { Sql } from './sql.js';

/** Migrations sit beside this module's source; `dist/db` and `src/db` are at the same depth. */
const MIGRATIONS_DIR = new URL('../../src/db/migrations/', import.meta.url);

/** Arbitrary but fixed: serialises the creation of the migrations table across processes. */
const MIGRATION_LOCK = 0x1e0f10;

export interface Migration {
  id: number;
  name: string;
  sql: string;
}

export async function loadMigrations(): Promise<Migration[]> {
  const files = (await readdir(MIGRATIONS_DIR)).filter((f) => /^\d{3}_[a-z0-9_]+\.sql$/.test(f)).sort();
  return Promise.all(
    files.map(async (name) => ({
      id: Number(name.slice(0, 3)),
      name,
      sql: await readFile(new URL(name, MIGRATIONS_DIR), 'utf8'),
    })),
  );
}

/**
 * Applies pending migrations, each in its own transaction that first inserts its own row in
 * `leoflow_migrations`: when two processes migrate at once, the second blocks on that row and
 * then collides on the key instead of half-applying the same file.
 */
export async function migrate(sql: Sql, logger?: Logger): Promise<number> {
  await sql.begin(async (tx) => {
    await tx`select pg_advisory_xact_lock(${MIGRATION_LOCK})`;
    await tx`create table if not exists leoflow_migrations (
      id integer primary key, name text not null, applied_at timestamptz not null default now())`;
  });
  const applied = new Set((await sql<{ id: number }[]>`select id from leoflow_migrations`).map((r) => r.id));
  let count = 0;
  for (const m of await loadMigrations()) {
    if (applied.has(m.id)) continue;
    try {
      await sql.begin(async (tx) => {
        // Must come first so we can detect a concurrent migration.
        await tx`insert into leoflow_migrations (id, name) values (${m.id}, ${m.name})`;
        await tx.unsafe(m.sql);
      });
      count++;
      logger?.info({ migration: m.name }, 'applied migration');
    } catch (err) {
      if ((err as { code?: string }).code === '23505') continue; // applied by another process
      throw new Error(`migration ${m.name} failed: ${(err as Error).message}`, { cause: err });
    }
  }
  return count;
}

/** The newest migration the database has recorded (its file name), or null before any. */
export async function latestMigration(sql: Sql): Promise<string | null> {
  const [{ exists } = { exists: false }] = await sql<
    { exists: boolean }[]
  >`select to_regclass('leoflow_migrations') is not null as exists`;
  if (!exists) return null;
  const [row] = await sql<{ name: string }[]>`select name from leoflow_migrations order by id desc limit 1`;
  return row?.name ?? null;
}

/**
 * The migrations this build knows that the database has not recorded, by file name: what a
 * replica that does not migrate (an observer) waits for, and what readiness reports.
 */
export async function pendingMigrations(sql: Sql): Promise<string[]> {
  const [{ exists } = { exists: false }] = await sql<
    { exists: boolean }[]
  >`select to_regclass('leoflow_migrations') is not null as exists`;
  const applied = exists
    ? new Set((await sql<{ id: number }[]>`select id from leoflow_migrations`).map((r) => r.id))
    : new Set<number>();
  return (await loadMigrations()).filter((m) => !applied.has(m.id)).map((m) => m.name);
}
