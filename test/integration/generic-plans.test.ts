import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AttemptResult } from '../../src/core/attempt.js';
import { claimAttempts } from '../../src/db/attempts/claim-attempt.js';
import { createReportBatcher } from '../../src/db/attempts/report-batcher.js';
import { upsertDag } from '../../src/db/dags.js';
import { createRun } from '../../src/db/runs.js';
import { createSql, type Sql } from '../../src/db/sql.js';
import { listTis, listTisOfRunsOfTis } from '../../src/db/tis.js';
import { planBehindEnds } from '../../src/scheduler/plan-ahead.js';
import { step } from '../../src/scheduler/step.js';
import { leaderHarness } from '../helpers/scheduler-harness.js';
import { quietLogWriter } from '../helpers/quiet-log-writer.js';
import { dag, task } from '../helpers/spec-builders.js';
import { createTestDatabase, type TestDatabase } from '../helpers/test-database.js';

/**
 * The reports pool (attempt reports, what rides behind their ends) and the claims connection (the
 * agents' claims) plan each statement once per connection and keep the plan. A kept plan may have been made before the
 * tables had statistics (a new database, or a burst that autovacuum has not analyzed yet), so its
 * statements must find their rows through an index whatever the statistics say.
 */

const OK: AttemptResult = { exitCode: 0, signal: null, error: null, outcome: 'success' };
/** The tables that grow with every run: a plan that scans one of them whole is a plan that gets
 *  slower with every run ever made. */
const BIG = ['task_instances', 'dag_runs', 'events', 'task_logs'];

let db: TestDatabase;
let generic: Sql;
beforeAll(async () => {
  db = await createTestDatabase();
  generic = createSql(db.url, { max: 2, genericPlans: true });
  // No autovacuum here: the tables keep no statistics, as in a new database.
  // A partitioned table takes no storage parameters: its partitions do.
  for (const t of BIG) {
    const leaves = await db.sql<
      { name: string }[]
    >`select relid::regclass::text as name from pg_partition_tree(${t}::regclass) where isleaf`;
    for (const l of leaves) await db.sql.unsafe(`alter table ${l.name} set (autovacuum_enabled = false)`);
  }
  // Enough history that a whole scan costs more than a lookup: 3,000 one-task runs.
  const spec = dag('history', [task('a')]);
  const { dag: row } = await upsertDag(db.sql, spec, 'history.yaml');
  await db.sql.begin(async (tx) => {
    for (let i = 0; i < 3000; i++) {
      await createRun(tx, {
        dagId: 'history',
        dagVersion: row.version,
        runKey: `r${i}`,
        runType: 'manual',
        logicalDate: new Date(),
        conf: {},
        defaultExecutor: 'subprocess',
      });
    }
  });
  // History, not work: the scheduler leaves these runs queued.
  await db.sql`update dags set paused = true where dag_id = 'history'`;
  const analyzed = await db.sql<{ relname: string }[]>`
    select relname from pg_stat_user_tables where relname = any(${BIG}) and (last_analyze is not null or last_autoanalyze is not null)`;
  expect(analyzed).toEqual([]);
});
afterAll(async () => {
  await generic.end({ timeout: 5 });
  await db.drop();
});

describe('the reports pool', () => {
  it('keeps generic plans, the main pool does not', async () => {
    expect((await generic`show plan_cache_mode`)[0]!.plan_cache_mode).toBe('force_generic_plan');
    expect((await db.sql`show plan_cache_mode`)[0]!.plan_cache_mode).toBe('auto');
  });

  it('reads the catalog on a new connection without JIT (a scan it cannot avoid is not costed into compiling)', async () => {
    // What postgres.js sends first on every new connection. With sequential scans off and JIT on,
    // PostgreSQL before 18 compiled it: 150–270 ms before a new connection's first report.
    const typeRead = `select b.oid, b.typarray from pg_catalog.pg_type a left join pg_catalog.pg_type b on b.oid = a.typelem
      where a.typcategory = 'A' group by b.oid, b.typarray order by b.oid`;
    const conn = await generic.reserve();
    try {
      const [row] = await conn.unsafe(`explain (format json) ${typeRead}`);
      expect((row!['QUERY PLAN'] as Record<string, unknown>[])[0]!.JIT).toBeUndefined();
    } finally {
      conn.release();
    }
  });

  it('reads the runs behind the ends through the runs index with a plan made before any statistics', async () => {
    const [last] = await db.sql<
      { id: string; run_id: string }[]
    >`select id, run_id from task_instances order by id desc limit 1`;

    const { string } = await listTisOfRunsOfTis(db.sql, [last!.id]).describe();
    expect(await wholeScans(string)).toEqual([]);
    // And it answers what it should: every task instance of that run.
    expect((await listTisOfRunsOfTis(generic, [last!.id])).map((t) => t.run_id)).toEqual([last!.run_id]);
  });

  it('sends no statement that scans a growing table whole, on the way of a chain, its lines, its claims and a failure', async () => {
    const rec = recording(generic);
    const { ctx, offered, errors } = leaderHarness(db.sql);
    const logs = quietLogWriter(rec.sql);
    const reports = createReportBatcher(rec.sql, { retryMs: 1000, logs });
    reports.endsSent.register((on, ends) => planBehindEnds(ctx, on, ends));
    const spec = dag('chain', [task('a'), task('b', { dependsOn: ['a'] }), task('c', { dependsOn: ['b'] }), task('d')]);
    const { dag: row } = await upsertDag(db.sql, spec, 'chain.yaml');
    const { run } = await db.sql.begin((tx) =>
      createRun(tx, {
        dagId: 'chain',
        dagVersion: row.version,
        runKey: 'c',
        runType: 'manual',
        logicalDate: new Date(),
        conf: {},
        defaultExecutor: 'subprocess',
      }),
    );
    await step(ctx);
    // Each task: started, a line, ended; b and c claimed behind the ends before them, the run
    // ended behind the last; d fails (nothing planned ahead: the runs are read behind its end).
    for (const taskId of ['a', 'd', 'b', 'c']) {
      const item = offered.find((o) => o.runId === run.id && o.taskId === taskId);
      expect(item?.claim, `${taskId} offered with its claim`).toBeDefined();
      const a = { tiId: item!.tiId, tryNumber: item!.claim!.tryNumber, attemptToken: item!.claim!.attemptToken };
      expect(await reports.started(a, { pid: 1, agentId: null })).toBe(true);
      logs.write(a.tiId, a.tryNumber, a.attemptToken, 'stdout', `hello from ${taskId}`);
      const result =
        taskId === 'd' ? { exitCode: 1, signal: null, error: 'exit code 1', outcome: 'failed' as const } : OK;
      expect((await reports.finished(a, result)).verdict).toBe(result.outcome);
    }
    await reports.drain();
    // d failed, so nothing was planned ahead of its end and the run's end is the step's.
    await step(ctx);
    expect(errors).toEqual([]);
    expect(Object.fromEntries((await listTis(db.sql, run.id)).map((t) => [t.task_id, t.state]))).toEqual({
      a: 'success',
      b: 'success',
      c: 'success',
      d: 'failed',
    });
    expect((await db.sql<{ state: string }[]>`select state from dag_runs where id = ${run.id}`)[0]!.state).toBe(
      'failed',
    );
    // The agents executor's claims go through this pool too.
    const waiting = await scheduleTisOf(['r1', 'r2']);
    await db.sql`update dag_runs set state = 'running' where run_key in ('r1', 'r2')`;
    expect((await claimForA1(rec.sql, waiting)).size).toBe(2);

    const statements = rec.statements();
    // Starts, lines, ends, the plans and the run's end ahead, the reads behind, the claims.
    expect(statements.length).toBeGreaterThanOrEqual(7);
    for (const text of statements) expect(await wholeScans(text), text).toEqual([]);
  });

  it('ends a run in the round trip of its last end by looking the run up, not by reading every running run', async () => {
    // Many runs running (their tasks waiting for slots, say): the end of one must not read them all.
    // With statistics this time: a plan is kept whenever a connection first sends the statement,
    // before or after autovacuum has analyzed the tables.
    await db.sql`update dag_runs set state = 'running', started_at = now() where dag_id = 'history' and run_key <> 'r0'`;
    await db.sql`analyze dag_runs, task_instances`;
    const rec = recording(generic);
    const { ctx, offered, errors } = leaderHarness(db.sql);
    const reports = createReportBatcher(rec.sql, { retryMs: 1000, logs: quietLogWriter(rec.sql) });
    reports.endsSent.register((on, ends) => planBehindEnds(ctx, on, ends));
    const spec = dag('pair', [task('a'), task('b', { dependsOn: ['a'] })]);
    const { dag: row } = await upsertDag(db.sql, spec, 'pair.yaml');
    const { run } = await db.sql.begin((tx) =>
      createRun(tx, {
        dagId: 'pair',
        dagVersion: row.version,
        runKey: 'p',
        runType: 'manual',
        logicalDate: new Date(),
        conf: {},
        defaultExecutor: 'subprocess',
      }),
    );
    await step(ctx);
    for (const taskId of ['a', 'b']) {
      // b was claimed behind a's end, without a step.
      const item = offered.find((o) => o.runId === run.id && o.taskId === taskId);
      expect(item?.claim, `${taskId} offered with its claim`).toBeDefined();
      const a = { tiId: item!.tiId, tryNumber: item!.claim!.tryNumber, attemptToken: item!.claim!.attemptToken };
      // a's reports one after the other; b's together, so they are written as one.
      const [started, finished] =
        taskId === 'a'
          ? [await reports.started(a, { pid: 1, agentId: null }), await reports.finished(a, OK)]
          : await Promise.all([reports.started(a, { pid: 1, agentId: null }), reports.finished(a, OK)]);
      expect(started).toBe(true);
      expect(finished.verdict).toBe('success');
    }
    await reports.drain();
    expect(errors).toEqual([]);
    expect(
      rec.statements().some((s) => /for no key update of t/.test(s)),
      "b's Started and Finished written as one",
    ).toBe(true);
    // Ended behind b's end: no step ran since.
    expect((await db.sql<{ state: string }[]>`select state from dag_runs where id = ${run.id}`)[0]!.state).toBe(
      'success',
    );
    expect(
      rec.statements().some((s) => /update dag_runs r set state = w\.outcome/.test(s)),
      'the run ended behind the end',
    ).toBe(true);
    // And the agents executor's claims, among those running runs.
    const waiting = await scheduleTisOf(['r3', 'r4']);
    expect((await claimForA1(rec.sql, waiting)).size).toBe(2);
    // It found the run by its key (it read every running run, 0.5 ms a call at 1,000 of them),
    // and so did every other statement on the way, with these statistics too.
    for (const text of rec.statements()) expect(await wholeScans(text), text).toEqual([]);
  });
});

/**
 * The scans of a growing table, in the plan the reports pool keeps for this statement, that find
 * their rows by no key (a sequential scan, an index read from end to end).
 */
/** Schedules every task instance of the runs of these keys; resolves with their ids. */
async function scheduleTisOf(runKeys: string[]): Promise<string[]> {
  const rows = await db.sql<{ id: string }[]>`
    update task_instances t set state = 'scheduled' from dag_runs r
    where r.id = t.run_id and r.run_key = any(${runKeys}) returning t.id`;
  return rows.map((t) => t.id);
}

/** The agents executor's batched claim of these task instances, each for agent a1. */
function claimForA1(sql: Sql, tiIds: string[]) {
  return claimAttempts(
    sql,
    'agents',
    tiIds.map((tiId) => ({ tiId, agentId: 'a1' })),
  );
}

async function wholeScans(text: string): Promise<string[]> {
  const params = Math.max(0, ...[...text.matchAll(/\$(\d+)/g)].map((m) => Number(m[1])));
  const conn = await generic.reserve();
  try {
    await conn.unsafe(`prepare s as ${text}`);
    // A generic plan does not depend on the values: nulls will do.
    const [row] = await conn.unsafe(
      `explain (format json) execute s${params > 0 ? `(${Array(params).fill('null').join(', ')})` : ''}`,
    );
    await conn.unsafe('deallocate s');
    // A bitmap index scan names its index, not its table.
    const tableOf = new Map(
      (
        await conn.unsafe<{ index: string; table: string }[]>(
          `select indexrelid::regclass::text as index, indrelid::regclass::text as "table" from pg_index`,
        )
      ).map((r) => [r.index, r.table]),
    );
    const found: string[] = [];
    const walk = (node: Record<string, unknown>) => {
      const rel = (node['Relation Name'] as string | undefined) ?? tableOf.get(node['Index Name'] as string);
      const type = node['Node Type'] as string;
      if (
        rel &&
        BIG.includes(rel) &&
        type !== 'ModifyTable' &&
        node['Index Cond'] === undefined &&
        node['Recheck Cond'] === undefined
      )
        found.push(
          `${type} on ${rel}${node['Index Name'] ? ` using ${String(node['Index Name'])}` : ''}${node.Filter ? ` filtering ${String(node.Filter)}` : ''}`,
        );
      for (const child of (node.Plans as Record<string, unknown>[] | undefined) ?? []) walk(child);
    };
    const [explained] = row!['QUERY PLAN'] as { Plan: Record<string, unknown>; JIT?: unknown }[];
    walk(explained!.Plan);
    if (explained!.JIT !== undefined) found.push('JIT compilation');
    return found;
  } finally {
    conn.release();
  }
}

/** The pool (and the connections reserved from it), keeping every statement sent. */
function recording(sql: Sql): { sql: Sql; statements(): string[] } {
  const made: { statement?: { string: string } }[] = [];
  const wrap = <T extends object>(target: T): T =>
    new Proxy(target, {
      apply(t, thisArg, args) {
        const q = Reflect.apply(t as never, thisArg, args) as { statement?: { string: string } };
        made.push(q);
        return q;
      },
      get(t, prop, receiver) {
        const v = Reflect.get(t, prop, receiver) as unknown;
        if (prop === 'reserve') return async () => wrap(await (v as () => Promise<object>).call(t));
        return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(t) : v;
      },
    });
  // A fragment is never sent, so never built: only statements have a text.
  return {
    sql: wrap(sql),
    statements: () => [...new Set(made.flatMap((q) => (q.statement ? [q.statement.string] : [])))],
  };
}
