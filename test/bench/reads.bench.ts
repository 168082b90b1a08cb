import net from 'node:net';
import postgres from 'postgres';
import { describe, expect, it } from 'vitest';
import { parseDag } from '../../src/core/dag/parse-dag.js';
import { upsertDag } from '../../src/db/dags.js';
import { activeRuns, createRunOfDag, listRuns } from '../../src/db/runs.js';
import type { Sql } from '../../src/db/sql.js';
import { listTisOfRuns } from '../../src/db/tis.js';
import { createTestDatabase, type TestDatabase } from '../helpers/test-database.js';
import { median, round } from './pg-xacts.js';
import { percentile, report } from './report.js';

/**
 * reads: what the history of one DAG costs to keep and to read. 10,000 runs of a 40-task DAG made
 * by the function TriggerRun calls (`createRunOfDag`), 1,000 of them then running. Measured:
 * bytes on disk per run (`pg_total_relation_size`: heap, TOAST and indexes, after VACUUM); the
 * API's ListRuns of 1,000 runs; the planner's read of 1,000 running runs (a full step's read) and
 * of 1,000 runs by id (a targeted step's), each with its task instances read beside it. Per read:
 * the round trip on the harness's clock (p50 of REPS, the driver's parsing included), the bytes
 * Postgres sent (counted by a proxy in front of it), and, on PostgreSQL 17 or later, Postgres's
 * own time for it with its output serialized (`EXPLAIN (ANALYZE, SERIALIZE)`).
 */

const RUNS = Number(process.env.LEOFLOW_BENCH_READS_RUNS ?? 10_000);
const ACTIVE = 1_000;
const TASKS = 40;
const REPS = 20;

/** A DAG of the size the issue names (~10 KB of spec): 40 tasks in a chain, each with a command,
 *  retries and a timeout, as a real pipeline's tasks have. */
function dagYaml(): string {
  const lines = ['dag_id: history', 'description: Daily sales pipeline, 40 steps', 'max_active_runs: 100000', 'tasks:'];
  for (let i = 0; i < TASKS; i++) {
    const id = `step_${String(i).padStart(2, '0')}`;
    lines.push(
      `  - id: ${id}`,
      `    command: ["python", "-m", "pipelines.daily_sales.${id}", "--date", "{{ ds }}"]`,
      '    retries: 2',
      '    timeout: 30m',
    );
    if (i > 0) lines.push(`    depends_on: [step_${String(i - 1).padStart(2, '0')}]`);
  }
  return lines.join('\n') + '\n';
}

/** A loopback proxy in front of Postgres that counts the bytes Postgres sends. */
async function countingProxy(target: URL): Promise<{ port: number; received(): number; close(): Promise<void> }> {
  let received = 0;
  const sockets = new Set<net.Socket>();
  const server = net.createServer((client) => {
    const upstream = net.connect(Number(target.port || 5432), target.hostname);
    sockets.add(client).add(upstream);
    const drop = () => (client.destroy(), upstream.destroy());
    client.on('error', drop).on('close', drop);
    upstream.on('error', drop).on('close', drop);
    upstream.on('data', (chunk: Buffer) => (received += chunk.length));
    client.pipe(upstream);
    upstream.pipe(client);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as net.AddressInfo).port,
    received: () => received,
    async close() {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

interface Measured {
  read: string;
  rows: number;
  p50_ms: number;
  p99_ms: number;
  kb_sent: number;
  pg_exec_ms: number | string;
  pg_serialize_ms: number | string;
}

describe('reads', () => {
  it('measures disk per run, ListRuns and the planner read', async () => {
    const db: TestDatabase = await createTestDatabase();
    const url = new URL(db.url);
    const proxy = await countingProxy(url);
    // The measured pool: one connection through the proxy, whose statements are kept to be
    // explained afterwards.
    const statements: { query: string; params: unknown[] }[] = [];
    const via = new URL(db.url);
    via.hostname = '127.0.0.1';
    via.port = String(proxy.port);
    const measured = postgres(via.toString(), {
      max: 1,
      types: {},
      onnotice: () => {},
      debug: (_c, query, params) => statements.push({ query, params: params as unknown[] }),
    }) as unknown as Sql;
    try {
      const spec = parseDag(dagYaml(), 'history.yaml');
      await upsertDag(db.sql, spec, dagYaml());
      const made = performance.now();
      for (let i = 0; i < RUNS; i += 500) {
        await db.sql.begin(async (tx) => {
          for (let j = i; j < Math.min(RUNS, i + 500); j++) {
            const r = await createRunOfDag(tx as unknown as Sql, {
              dagId: 'history',
              runKey: `r${j}`,
              runType: 'manual',
              logicalDate: new Date(),
              conf: { batch: j },
              defaultExecutor: 'subprocess',
            });
            expect(r?.created).toBe(true);
          }
        });
      }
      const madeMs = performance.now() - made;
      // The oldest ACTIVE runs run; the rest stay queued (as a backlog would).
      await db.sql`update dag_runs set state = 'running', started_at = now() where id in (select id from dag_runs order by id limit ${ACTIVE})`;
      await db.sql`update dag_runs set state = 'success', started_at = now(), ended_at = now() where id not in (select id from dag_runs order by id limit ${ACTIVE})`;
      await db.sql.unsafe('vacuum (analyze)');

      const [v] = await db.sql<{ server_version_num: string }[]>`show server_version_num`;
      const serialize = Number(v!.server_version_num) >= 170000;
      const sizes = await db.sql<{ relname: string; bytes: string }[]>`
        select c.relname, pg_total_relation_size(c.oid)::bigint as bytes from pg_class c
        join pg_namespace n on n.oid = c.relnamespace
        where n.nspname = 'public' and c.relkind = 'r'`;
      const size = (name: string) => Number(sizes.find((s) => s.relname === name)?.bytes ?? 0);
      const [specSize] = await db.sql<{ text: number; stored: number }[]>`
        select octet_length(spec::text) as text, pg_column_size(spec) as stored from dags where dag_id = 'history'`;

      const runIds = (await db.sql<{ id: string }[]>`select id from dag_runs where state = 'running' order by id`).map(
        (r) => r.id,
      );
      const reads: { name: string; run(): Promise<unknown[]>; statements: number }[] = [
        { name: 'ListRuns, 1,000 runs (API)', run: () => listRuns(measured, { limit: 1000 }), statements: 1 },
        {
          name: 'ListRuns of the DAG, 1,000 runs (API)',
          run: () => listRuns(measured, { dagId: 'history', limit: 1000 }),
          statements: 1,
        },
        {
          name: 'planner: 1,000 running runs (full step)',
          run: async () => await activeRuns(measured, 1000, { running: true }),
          statements: 1,
        },
        {
          name: 'planner: 1,000 runs by id (targeted step)',
          run: async () => await activeRuns(measured, 1000, { runIds }),
          statements: 1,
        },
        {
          name: 'planner: the task instances of 1,000 runs',
          run: () => listTisOfRuns(measured, runIds),
          statements: 1,
        },
      ];
      const rows: Measured[] = [];
      for (const read of reads) {
        let got: unknown[] = [];
        for (let i = 0; i < 3; i++) got = await read.run(); // warm: plans, catalog reads, the page cache
        const times: number[] = [];
        const before = proxy.received();
        for (let i = 0; i < REPS; i++) {
          const t = performance.now();
          got = await read.run();
          times.push(performance.now() - t);
        }
        const bytes = (proxy.received() - before) / REPS;
        let exec: number | string = 'n/a (PostgreSQL < 17)';
        let ser: number | string = 'n/a';
        if (serialize) {
          const last = statements[statements.length - 1]!;
          const execs: number[] = [];
          const sers: number[] = [];
          for (let i = 0; i < 5; i++) {
            const [plan] = await db.sql.unsafe(
              `explain (analyze, serialize text, format json) ${last.query}`,
              last.params as never[],
            );
            const p = (
              plan as unknown as { 'QUERY PLAN': { 'Execution Time': number; Serialization: { Time: number } }[] }
            )['QUERY PLAN'][0]!;
            execs.push(p['Execution Time']);
            sers.push(p.Serialization.Time);
          }
          exec = round(median(execs), 2);
          ser = round(median(sers), 2);
        }
        rows.push({
          read: read.name,
          rows: got.length,
          p50_ms: round(percentile(times, 50), 2),
          p99_ms: round(percentile(times, 99), 2),
          kb_sent: round(bytes / 1024, 1),
          pg_exec_ms: exec,
          pg_serialize_ms: ser,
        });
      }
      await report('reads', rows as unknown as Record<string, string | number>[]);
      const disk = [
        { relation: 'dag_runs (heap, TOAST, indexes)', bytes_per_run: round(size('dag_runs') / RUNS, 0) },
        { relation: 'dag_versions', bytes_per_run: round(size('dag_versions') / RUNS, 1) },
        { relation: 'task_instances', bytes_per_run: round(size('task_instances') / RUNS, 0) },
        { relation: 'events', bytes_per_run: round(size('events') / RUNS, 0) },
        { relation: 'all tables', bytes_per_run: round(sizes.reduce((a, s) => a + Number(s.bytes), 0) / RUNS, 0) },
      ];
      await report('reads-disk', disk, {
        runs: RUNS,
        tasks: TASKS,
        specTextBytes: specSize!.text,
        specStoredBytes: specSize!.stored,
        madeMs: round(madeMs, 0),
      });
      process.stdout.write(
        `\nspec: ${specSize!.text} bytes as text, ${specSize!.stored} stored; ${RUNS} runs made in ${round(madeMs / 1000, 1)} s\n`,
      );
    } finally {
      await measured.end({ timeout: 5 });
      await proxy.close();
      await db.drop();
    }
  });
});
