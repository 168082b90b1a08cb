import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { createClients } from '../../src/cli/client.js';
import { getDag } from '../../src/db/dags.js';
import { createRun } from '../../src/db/runs.js';
import { createSql } from '../../src/db/sql.js';
import { startInstantAgent } from '../bench/instant-agent.js';
import { cli, startServer, waitFor, type ServerProcess } from '../helpers/leoflow-process.js';
import { createTestDatabase, type TestDatabase } from '../helpers/test-database.js';

/**
 * The speed guard: a short throughput run and a short chain, each divided by a yardstick measured
 * in the same test on the same machine, checked against the baseline in test/speed/baseline.json,
 * so a regression like issue 35's (3-6x fewer tasks a second, unnoticed for days) fails `npm test`.
 *
 * - The throughput run is paced by events alone (the tick pushed out to an hour): work left for
 *   the tick to pick up never ends, and the run fails, however fast or loaded the machine.
 * - Postgres rows written a task (pg_stat_database, read from another database once the server
 *   has stopped, so every backend has published its counts): independent of load. Its rate is divided by a plain
 *   Postgres insert loop's; the chain's step gap is compared with `spawn('true')`.
 * - Timing ratios move with the machine's load, so each is a floor at 70 % of the baseline, and
 *   a miss is measured once more (yardstick included) before it fails: a real regression of this
 *   kind misses twice; a noisy neighbour rarely does.
 */

interface Baseline {
  rowsPerTask: number;
  throughputPerInsert: number;
  spawnPerChainGap: number;
}

const BASELINE_FILE = new URL('./baseline.json', import.meta.url);
const BASELINE: Baseline = JSON.parse(readFileSync(BASELINE_FILE, 'utf8'));
/** LEOFLOW_SPEED_GUARD_RECORD=1: print the figures to record as the baseline instead of checking them. */
const RECORD = process.env.LEOFLOW_SPEED_GUARD_RECORD === '1';
/** A ratio may fall this far below its baseline (timing), or transactions rise this far above it. */
const SLACK = 0.3;
const TASKS = 1000;
const SLOTS = 10;
const CHAIN = 20;
/** The Pro pool, as the throughput benchmark runs (Lite's queue of one is not a throughput setting). */
const POOL_ARGS = ['--dispatch-workers', '16', '--dispatch-queue', '256'];
/** The throughput run's tick: an hour, so only events pace it. Another value (LEOFLOW_SPEED_GUARD_TICK)
 *  only to compare with commits older than the event-paced refusals (docs/benchmarks-bisect.md). */
const TICK = process.env.LEOFLOW_SPEED_GUARD_TICK ?? '1h';

let tmp: string;
beforeAll(async () => {
  tmp = await mkdtemp(path.join(os.tmpdir(), 'leoflow-speed-'));
});
afterAll(async () => {
  await rm(tmp, { recursive: true, force: true });
});

/**
 * The yardstick: single-row autocommit inserts a second, SLOTS connections inserting at once (so
 * commits are flushed together, as the run's are) for ROUND_MS, the median of ROUNDS rounds after
 * a warm-up. One connection's loop followed each fsync's luck (one loop of 500 ranged 1,224–1,892/s
 * between runs of the same build, 313–3,375/s between rounds of one run); this one moves ~±10 %.
 * The first seconds after CREATE DATABASE are slow for any workload, hence the warm-up.
 */
async function insertRate(db: TestDatabase, admin: ReturnType<typeof createSql>, rounds = 7): Promise<number> {
  const ROUND_MS = 300;
  // Whatever the database's creation or the run left dirty is flushed first, not during the loop.
  await admin`checkpoint`;
  const sql = createSql(db.url, { max: SLOTS });
  try {
    await sql`create table if not exists yardstick (id bigserial primary key, at timestamptz not null default now(), note text)`;
    const round = async (ms: number): Promise<number> => {
      let n = 0;
      const t = performance.now();
      await Promise.all(
        Array.from({ length: SLOTS }, async () => {
          while (performance.now() - t < ms) {
            await sql`insert into yardstick (note) values (${'x'})`;
            n++;
          }
        }),
      );
      return n / ((performance.now() - t) / 1000);
    };
    await round(1000); // warm-up: connections, plans, the new database's first flushes
    const rates: number[] = [];
    for (let r = 0; r < rounds; r++) rates.push(await round(ROUND_MS));
    return median(rates);
  } finally {
    await sql.end({ timeout: 5 });
  }
}

/** `spawn('true')` until it exits, one at a time: milliseconds each (median). */
async function spawnMs(n = 30): Promise<number> {
  const ms: number[] = [];
  for (let i = 0; i < n; i++) {
    const t = performance.now();
    await new Promise<void>((resolve, reject) =>
      spawn('true')
        .on('exit', () => resolve())
        .on('error', reject),
    );
    ms.push(performance.now() - t);
  }
  return median(ms);
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor((s.length - 1) / 2)]!;
}

/** A database's transactions and rows written so far, as its backends have published them. */
async function counts(
  admin: ReturnType<typeof createSql>,
  name: string,
): Promise<{ xacts: number; rows: number; wal: number }> {
  const [r] = await admin<{ x: string; w: string; wal: string }[]>`
    select xact_commit + xact_rollback as x, tup_inserted + tup_updated + tup_deleted as w, pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0') as wal
    from pg_stat_database where datname = ${name}`;
  return { xacts: Number(r!.x), rows: Number(r!.w), wal: Number(r!.wal) };
}

/** Rows written a table so far (pg_stat_user_tables, partitions by their own name), from a connection of the measured database. */
async function tableRows(db: TestDatabase): Promise<Map<string, number>> {
  const sql = createSql(db.url, { max: 1 });
  try {
    const rows = await sql<
      { t: string; w: string }[]
    >`select relname as t, n_tup_ins + n_tup_upd + n_tup_del as w from pg_stat_user_tables`;
    return new Map(rows.map((r) => [r.t, Number(r.w)]));
  } finally {
    await sql.end({ timeout: 5 });
  }
}

/** TASKS one-task runs queued while paused, then run through one instant agent of SLOTS slots. */
async function throughput(floor: number): Promise<{
  tasksPerSec: number;
  rowsPerTask: number;
  xactsPerTask: number;
  walKBPerTask: number;
  insertsPerSec: number;
  insertsBefore: number;
  insertsAfter: number;
}> {
  const db = await createTestDatabase();
  const admin = createSql(inject('pgAdminUrl'), { max: 1 });
  let server: ServerProcess | null = null;
  let agent: ReturnType<typeof startInstantAgent> | null = null;
  try {
    const insertsBefore = await insertRate(db, admin);
    server = await startServer({
      env: { DATABASE_URL: db.url },
      args: ['--tick-interval', TICK, ...POOL_ARGS],
      quiet: true,
    });
    const file = path.join(tmp, 'guard.yaml');
    await writeFile(
      file,
      `dag_id: guard\nmax_active_runs: ${TASKS}\ntasks:\n  - id: t\n    executor: agents\n    command: ["true"]\n`,
    );
    expect((await cli(server.url, ['dag', 'apply', file])).code).toBe(0);
    const api = createClients(server.url);
    await api.workflow.pauseDag({ dagId: 'guard', paused: true });
    // Queued as TriggerRun queues them, on a connection of its own that is closed before the
    // first count: a backend publishes its counts at exit, but an idle one up to 10 s late.
    const dag = (await getDag(db.sql, 'guard'))!;
    const queue = createSql(db.url, { max: 1 });
    await queue.begin(async (tx) => {
      for (let i = 0; i < TASKS; i++) {
        await createRun(tx, {
          dagId: 'guard',
          dagVersion: dag.version,
          runKey: `g_${i}`,
          runType: 'manual',
          logicalDate: new Date(),
          conf: {},
          defaultExecutor: 'subprocess',
        });
      }
    });
    await queue.end({ timeout: 5 });
    const a = startInstantAgent(server.url, { agentId: 'guard', slots: SLOTS });
    agent = a;
    await waitFor(
      'agent connected',
      async () => (await api.cluster.listAgents({})).agents.some((x) => x.connected),
      30_000,
      50,
    );
    await new Promise((r) => setTimeout(r, 1500)); // the harness's and the start's counts published
    const c0 = await counts(admin, db.name);
    const t0 = await tableRows(db);
    await api.workflow.pauseDag({ dagId: 'guard', paused: false });
    // Only the agent's own count is watched (in-process, no query on the measured database).
    // Given up at three times the time the floor allows at this minute's yardstick: a build too slow
    // for the floor fails in seconds, not minutes (and work left to the tick never ends at all).
    const limitMs = Math.max(20_000, (3 * 1000 * TASKS) / (floor * insertsBefore));
    await waitFor(`${TASKS} ends acknowledged`, async () => a.acked >= TASKS, limitMs, 20);
    // A few reads of the measured database (a few transactions in 1,000 tasks' count).
    await waitFor(
      'every run ended',
      async () =>
        (await db.sql`select 1 from dag_runs where dag_id = 'guard' and state <> 'success' limit 1`).length === 0,
      20_000,
      100,
    );
    await a.close();
    agent = null;
    // Stopped: every backend of the server has exited, so it has published its counts.
    await server.stop();
    server = null;
    await new Promise((r) => setTimeout(r, 500));
    const c1 = await counts(admin, db.name);
    // Where the rows go, printed for whoever makes a task cheaper (the two reads above add ~2 rows in all).
    const t1 = await tableRows(db);
    const perTable = Object.fromEntries(
      [...t1]
        .map(([t, w]) => [t, Math.round(((w - (t0.get(t) ?? 0)) / TASKS) * 100) / 100] as const)
        .filter(([, w]) => w >= 0.05),
    );
    console.log(`speed-guard rows a task by table ${JSON.stringify(perTable)}`);
    const [w] = await db.sql<{ ms: number; done: number }[]>`
      select extract(epoch from max(r.ended_at) - min(t.started_at)) * 1000 as ms, count(*) filter (where r.state = 'success')::int as done
      from dag_runs r join task_instances t on t.run_id = r.id where r.dag_id = 'guard'`;
    expect(w!.done).toBe(TASKS);
    const insertsAfter = await insertRate(db, admin);
    return {
      tasksPerSec: TASKS / (Number(w!.ms) / 1000),
      rowsPerTask: (c1.rows - c0.rows) / TASKS,
      xactsPerTask: (c1.xacts - c0.xacts) / TASKS,
      // The whole server's WAL (exact with the tests' own Postgres, more on a shared one): printed only.
      walKBPerTask: (c1.wal - c0.wal) / 1024 / TASKS,
      insertsPerSec: (insertsBefore + insertsAfter) / 2,
      insertsBefore,
      insertsAfter,
    };
  } finally {
    await agent?.close();
    await server?.stop();
    await admin.end({ timeout: 5 });
    await db.drop();
  }
}

/** A chain of CHAIN `true` tasks on the Lite server's defaults: the step gap p50, task end → next start. */
async function chain(): Promise<{ gapMs: number; spawnMs: number }> {
  const db = await createTestDatabase();
  const server = await startServer({ env: { DATABASE_URL: db.url }, quiet: true });
  try {
    const before = await spawnMs();
    const tasks = Array.from(
      { length: CHAIN },
      (_, i) => `  - id: t${i}\n    command: ["true"]\n${i > 0 ? `    depends_on: [t${i - 1}]\n` : ''}`,
    ).join('');
    const file = path.join(tmp, 'chain.yaml');
    await writeFile(file, `dag_id: chain\ntasks:\n${tasks}`);
    expect((await cli(server.url, ['dag', 'apply', file])).code).toBe(0);
    const api = createClients(server.url);
    const gaps: number[] = [];
    for (let round = 0; round < 2; round++) {
      const runId = (await api.workflow.triggerRun({ dagId: 'chain' })).run!.runId;
      await waitFor(
        'chain ended',
        async () =>
          (await db.sql`select 1 from dag_runs where id = ${runId} and state in ('success', 'failed')`).length > 0,
        60_000,
        50,
      );
      const rows = await db.sql<
        { started: Date; ended: Date }[]
      >`select started_at as started, ended_at as ended from task_instances where run_id = ${runId} order by started_at`;
      expect(rows).toHaveLength(CHAIN);
      // The first round warms the server up (its first spawns, its plans).
      if (round > 0)
        for (let i = 1; i < rows.length; i++) gaps.push(rows[i]!.started.getTime() - rows[i - 1]!.ended.getTime());
    }
    const after = await spawnMs();
    return { gapMs: Math.max(0.1, median(gaps)), spawnMs: (before + after) / 2 };
  } finally {
    await server.stop();
    await db.drop();
  }
}

/** Measures until the ratio clears its floor, at most twice; the better figure counts. */
async function best<T>(measure: () => Promise<T>, ratio: (m: T) => number, floor: number): Promise<T> {
  const first = await measure();
  if (ratio(first) >= floor) return first;
  const second = await measure();
  return ratio(second) > ratio(first) ? second : first;
}

describe('speed guard (issue 35)', () => {
  it(`throughput: ${TASKS} no-op tasks through one agent, paced by events, against a Postgres insert loop`, async () => {
    const floor = BASELINE.throughputPerInsert * (1 - SLACK);
    const m = await best(
      () => throughput(floor),
      (x) => x.tasksPerSec / x.insertsPerSec,
      floor,
    );
    const ratio = m.tasksPerSec / m.insertsPerSec;
    console.log(`speed-guard throughput ${JSON.stringify({ ...m, ratio, load: os.loadavg()[0] })}`);
    if (RECORD) return;
    // Rows written a task: what each task costs Postgres, whatever the load. (Transactions a
    // task are printed, not checked: reads and flushes paced by the clock make a slow run's
    // count higher, 1.7 at load 15 and 2.9 at load 19 on the same build.)
    expect(m.rowsPerTask, 'Postgres rows written a task').toBeLessThanOrEqual(BASELINE.rowsPerTask * (1 + SLACK));
    expect(
      ratio,
      `tasks a second / inserts a second (baseline ${BASELINE.throughputPerInsert})`,
    ).toBeGreaterThanOrEqual(floor);
  }, 420_000);

  it(`chain: ${CHAIN} \`true\` tasks in a row, the step gap against spawn('true')`, async () => {
    const floor = BASELINE.spawnPerChainGap * (1 - SLACK);
    const m = await best(chain, (x) => x.spawnMs / x.gapMs, floor);
    const ratio = m.spawnMs / m.gapMs;
    console.log(`speed-guard chain ${JSON.stringify({ ...m, ratio, load: os.loadavg()[0] })}`);
    if (RECORD) return;
    expect(ratio, `spawn ms / step gap ms (baseline ${BASELINE.spawnPerChainGap})`).toBeGreaterThanOrEqual(floor);
  }, 420_000);
});
