import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { Logger, makeWorkerUtils, run, runMigrations, type Runner, type Task } from 'graphile-worker';
import pg from 'pg';
import { PgBoss } from 'pg-boss';
import { describe, expect, inject, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../test/helpers/test-database.js';
import { STATS_SETTLE_MS, median, round, sleep, xacts } from '../test/bench/pg-xacts.js';
import { reportRatios } from '../test/bench/ratios.js';
import { percentile, report } from '../test/bench/report.js';

/**
 * Peers on the same Postgres (the suite's embedded one from globalSetup), each in a database of
 * its own, measured by the same harness as Leoflow's throughput and chain benchmarks:
 * - throughput: N no-op jobs, queued at once (one bulk insert) into an idle, already connected
 *   worker; from the first handler call to the last job completed as seen in the database
 *   (polled every 20 ms); Postgres transactions per job from pg_stat_database, less the
 *   harness's own queries. Concurrency 10 and 50, as Leoflow's agent slots.
 * - latency: 200 jobs added one at a time (after 10 warm-up jobs), add called → handler started.
 * - chain of 40: each job adds the next from its handler; per step = handler start of job i →
 *   handler start of job i+1 (p50 over the 39 steps, median of 3 chains).
 * Each in its best configuration here: graphile-worker with its pool raised to the concurrency
 * and LISTEN/NOTIFY (its default, always on); pg-boss with batch fetch for throughput
 * (localConcurrency 1, batchSize = concurrency, burstWhenBatchFull, 0.5 s poll, the minimum) and
 * useListenNotify with a notify queue for latency and the chain.
 * And the machine's ceiling: pgbench (Debian's PostgreSQL 15 client) against the same embedded
 * Postgres, a one-statement single-row UPDATE transaction, 1 and 8 clients, 10 s each.
 */

const N = Number(process.env.LEOFLOW_BENCH_TASKS ?? 10_000);
const CONCURRENCY = (process.env.LEOFLOW_BENCH_CONCURRENCY ?? '10,50').split(',').map(Number);
const LATENCY_SAMPLES = 200;
const WARMUP = 10;
const CHAIN = 40;
const CHAIN_REPS = 3;
const POLL_MS = 20;
const WINDOW_LIMIT_MS = 120_000;
const PGBENCH = '/usr/lib/postgresql/15/bin/pgbench';
const exec = promisify(execFile);
const silent = new Logger(() => () => {});

export interface ThroughputResult {
  concurrency: number;
  jobs: number;
  done: number;
  jobsPerSec: number;
  xactPerJob: number;
  windowMs: number;
  /** From the enqueue call returned (jobs visible) to the last job done. */
  fromEnqueueMs: number;
}
export interface PeerResult {
  config: { throughput: string; latency: string };
  throughput: ThroughputResult[];
  latency: { p50: number; p99: number; samples: number };
  chain: { stepP50: number; stepP99: number; perStep: number };
}

/** Waits until `check` says the jobs are done (counting its queries), bounded. */
async function pollDone(check: () => Promise<boolean>): Promise<{ polls: number; ok: boolean }> {
  const deadline = performance.now() + WINDOW_LIMIT_MS;
  let polls = 0;
  while (performance.now() < deadline) {
    polls++;
    if (await check()) return { polls, ok: true };
    await sleep(POLL_MS);
  }
  return { polls, ok: false };
}

/** One throughput window: `enqueue` runs with the worker idle and connected; `onJob` is armed. */
/** `doneCount` resolves null while it need not ask the database (the handler has not seen every job). */
async function throughputWindow(
  db: TestDatabase,
  c: number,
  enqueue: () => Promise<void>,
  doneCount: () => Promise<number | null>,
  first: { at: number },
): Promise<ThroughputResult> {
  await sleep(STATS_SETTLE_MS);
  const x0 = await xacts(db.sql, db.name);
  await enqueue();
  const enqueued = performance.now();
  let done = 0;
  let queries = 0;
  await pollDone(async () => {
    const n = await doneCount();
    if (n === null) return false;
    queries++;
    return (done = n) >= N;
  });
  const end = performance.now();
  await sleep(STATS_SETTLE_MS);
  const x1 = await xacts(db.sql, db.name);
  const windowMs = end - first.at;
  return {
    concurrency: c,
    jobs: N,
    done,
    jobsPerSec: done / (windowMs / 1000),
    xactPerJob: (x1 - x0 - queries - 1) / done,
    windowMs,
    fromEnqueueMs: end - enqueued,
  };
}

/** add called → handler started, one job at a time. */
async function latencyRun(
  add: (i: number) => Promise<unknown>,
  arm: (resolve: (at: number) => void) => void,
): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < WARMUP + LATENCY_SAMPLES; i++) {
    const started = new Promise<number>((resolve, reject) => {
      const t = setTimeout(() => reject(new Error('job not started within 10 s')), 10_000);
      arm((at) => (clearTimeout(t), resolve(at)));
    });
    const t0 = performance.now();
    await add(i);
    const at = await started;
    if (i >= WARMUP) out.push(at - t0);
    await sleep(5);
  }
  return out;
}

/** Runs one chain of CHAIN jobs; `starts` is filled by the handler. */
async function chainRun(
  startChain: () => Promise<unknown>,
  starts: number[],
): Promise<{ stepP50: number; stepP99: number; perStep: number }> {
  starts.length = 0;
  await startChain();
  const deadline = performance.now() + 60_000;
  while (starts.length < CHAIN && performance.now() < deadline) await sleep(5);
  expect(starts.length).toBe(CHAIN);
  const steps = starts.slice(1).map((s, i) => s - starts[i]!);
  return {
    stepP50: percentile(steps, 50),
    stepP99: percentile(steps, 99),
    perStep: (starts[CHAIN - 1]! - starts[0]!) / (CHAIN - 1),
  };
}

function medianChain(reps: { stepP50: number; stepP99: number; perStep: number }[]) {
  return {
    stepP50: median(reps.map((r) => r.stepP50)),
    stepP99: median(reps.map((r) => r.stepP99)),
    perStep: median(reps.map((r) => r.perStep)),
  };
}

/** graphile-worker's pool, ours so it is ended (not cut by the database drop) after the runner stops. */
function ownPool(url: string, max: number): pg.Pool {
  const pool = new pg.Pool({ connectionString: url, max });
  // Idle clients cut by the database drop at the end emit errors; graphile-worker also asks for
  // a handler on every client it checks out.
  pool.on('error', () => {});
  pool.on('connect', (client) => client.on('error', () => {}));
  return pool;
}

async function graphileWorker(): Promise<PeerResult> {
  const throughput: ThroughputResult[] = [];
  for (const c of CONCURRENCY) {
    const db = await createTestDatabase();
    const pool = ownPool(db.url, c + 2);
    let runner: Runner | null = null;
    try {
      await runMigrations({ pgPool: pool, logger: silent });
      const first = { at: 0 };
      let n = 0;
      const noop: Task = async () => {
        if (n++ === 0) first.at = performance.now();
      };
      runner = await run({ pgPool: pool, concurrency: c, noHandleSignals: true, logger: silent, taskList: { noop } });
      const utils = await makeWorkerUtils({ pgPool: pool, logger: silent });
      try {
        throughput.push(
          await throughputWindow(
            db,
            c,
            async () =>
              void (await utils.addJobs(Array.from({ length: N }, () => ({ identifier: 'noop', payload: {} })))),
            async () =>
              n < N
                ? null
                : N - Number((await db.sql<{ n: string }[]>`select count(*) as n from graphile_worker.jobs`)[0]!.n),
            first,
          ),
        );
      } finally {
        await utils.release();
      }
    } finally {
      await runner?.stop();
      await pool.end();
      await db.drop();
    }
  }

  // Latency and the chain: concurrency 10, pool 12.
  const db = await createTestDatabase();
  const pool = ownPool(db.url, 12);
  let runner: Runner | null = null;
  try {
    await runMigrations({ pgPool: pool, logger: silent });
    let onStart: ((at: number) => void) | null = null;
    const starts: number[] = [];
    runner = await run({
      pgPool: pool,
      concurrency: 10,
      noHandleSignals: true,
      logger: silent,
      taskList: {
        lat: async () => onStart?.(performance.now()),
        chain: async (payload, helpers) => {
          starts.push(performance.now());
          const i = (payload as { i: number }).i;
          if (i < CHAIN - 1) await helpers.addJob('chain', { i: i + 1 });
        },
      },
    });
    const utils = await makeWorkerUtils({ pgPool: pool, logger: silent });
    try {
      const lat = await latencyRun(
        () => utils.addJob('lat', {}),
        (r) => (onStart = r),
      );
      const chains = [];
      for (let i = 0; i < CHAIN_REPS + 1; i++)
        chains.push(await chainRun(() => utils.addJob('chain', { i: 0 }), starts));
      return {
        config: {
          throughput: 'concurrency C, pg pool of C+2, LISTEN/NOTIFY (default), no localQueue',
          latency: 'concurrency 10, pg pool of 12, LISTEN/NOTIFY',
        },
        throughput,
        latency: { p50: percentile(lat, 50), p99: percentile(lat, 99), samples: lat.length },
        chain: medianChain(chains.slice(1)),
      };
    } finally {
      await utils.release();
    }
  } finally {
    await runner?.stop();
    await pool.end();
    await db.drop();
  }
}

async function pgBoss(): Promise<PeerResult> {
  const errors: unknown[] = [];
  const throughput: ThroughputResult[] = [];
  for (const c of CONCURRENCY) {
    const db = await createTestDatabase();
    const boss = new PgBoss({ connectionString: db.url });
    boss.on('error', (e) => errors.push(e));
    try {
      await boss.start();
      await boss.createQueue('noop');
      const first = { at: 0 };
      let n = 0;
      await boss.work(
        'noop',
        { localConcurrency: 1, batchSize: c, burstWhenBatchFull: true, pollingIntervalSeconds: 0.5 },
        async (jobs) => {
          if (n === 0) first.at = performance.now();
          n += jobs.length;
        },
      );
      throughput.push(
        await throughputWindow(
          db,
          c,
          async () =>
            void (await boss.insert(
              'noop',
              Array.from({ length: N }, () => ({ data: {} })),
            )),
          // Asked only once the handler has seen every job, as for graphile-worker (and Leoflow).
          async () =>
            n < N
              ? null
              : Number(
                  (
                    await db.sql<
                      { n: string }[]
                    >`select count(*) as n from pgboss.job where name = 'noop' and state = 'completed'`
                  )[0]!.n,
                ),
          first,
        ),
      );
    } finally {
      await boss.stop({ graceful: true, timeout: 5000 });
      await db.drop();
    }
  }

  const db = await createTestDatabase();
  const boss = new PgBoss({ connectionString: db.url, useListenNotify: true });
  boss.on('error', (e) => errors.push(e));
  try {
    await boss.start();
    await boss.createQueue('lat', { notify: true });
    await boss.createQueue('chain', { notify: true });
    let onStart: ((at: number) => void) | null = null;
    const starts: number[] = [];
    await boss.work('lat', { localConcurrency: 10, batchSize: 1 }, async () => onStart?.(performance.now()));
    await boss.work<{ i: number }>('chain', { localConcurrency: 10, batchSize: 1 }, async ([job]) => {
      starts.push(performance.now());
      if (job!.data.i < CHAIN - 1) await boss.send('chain', { i: job!.data.i + 1 });
    });
    await sleep(1000); // the listener connects
    const lat = await latencyRun(
      () => boss.send('lat', {}),
      (r) => (onStart = r),
    );
    const chains = [];
    for (let i = 0; i < CHAIN_REPS + 1; i++) chains.push(await chainRun(() => boss.send('chain', { i: 0 }), starts));
    expect(errors).toEqual([]);
    return {
      config: {
        throughput: 'batch fetch: localConcurrency 1, batchSize C, burstWhenBatchFull, pollingIntervalSeconds 0.5',
        latency: 'useListenNotify, queue notify: true, localConcurrency 10, batchSize 1',
      },
      throughput,
      latency: { p50: percentile(lat, 50), p99: percentile(lat, 99), samples: lat.length },
      chain: medianChain(chains.slice(1)),
    };
  } finally {
    await boss.stop({ graceful: true, timeout: 5000 });
    await db.drop();
  }
}

/** pgbench: one single-row UPDATE per transaction (autocommit), 10 s, `clients` clients. */
async function pgbench(): Promise<{ serverVersion: string; runs: { clients: number; tps: number }[] }> {
  const db = await createTestDatabase();
  const u = new URL(inject('pgAdminUrl'));
  const env = {
    ...process.env,
    PGHOST: u.hostname,
    PGPORT: u.port,
    PGUSER: decodeURIComponent(u.username),
    PGPASSWORD: decodeURIComponent(u.password),
    PGDATABASE: db.name,
  };
  const tmp = await mkdtemp(path.join(os.tmpdir(), 'leoflow-pgbench-'));
  try {
    const script = path.join(tmp, 'update.sql');
    await writeFile(
      script,
      '\\set aid random(1, 100000)\nUPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid = :aid;\n',
    );
    await exec(PGBENCH, ['-i', '-s', '1', '-q'], { env, timeout: 60_000 });
    const out: { clients: number; tps: number }[] = [];
    for (const clients of [1, 8]) {
      const { stdout } = await exec(
        PGBENCH,
        ['-n', '-T', '10', '-c', String(clients), '-j', String(Math.min(clients, 2)), '-f', script],
        { env, timeout: 60_000 },
      );
      const m = /tps = ([\d.]+) \(without initial connection time\)/.exec(stdout);
      if (!m) throw new Error(`pgbench printed no tps:\n${stdout}`);
      out.push({ clients, tps: Number(m[1]) });
    }
    const [v] = await db.sql<{ v: string }[]>`select current_setting('server_version') as v`;
    return { serverVersion: v!.v, runs: out };
  } finally {
    await rm(tmp, { recursive: true, force: true });
    await db.drop();
  }
}

describe('peers', () => {
  it(`graphile-worker, pg-boss and pgbench on the same Postgres (${N} jobs)`, async () => {
    const { serverVersion, runs: bench } = await pgbench();
    const graphile = await graphileWorker();
    const boss = await pgBoss();
    const rows: Record<string, string | number>[] = [];
    for (const [name, p] of [
      ['graphile-worker 0.18.0', graphile],
      ['pg-boss 12.38.0', boss],
    ] as const) {
      for (const t of p.throughput) {
        rows.push({
          peer: name,
          measure: `throughput, ${N} no-op jobs, concurrency ${t.concurrency}`,
          value: `${round(t.jobsPerSec, 0)} jobs/s (${round(t.done / (t.fromEnqueueMs / 1000), 0)} from the insert; ${t.done}/${t.jobs} done)`,
          'pg xact/job': round(t.xactPerJob, 2),
          'of pgbench 8 clients': `${round((100 * t.jobsPerSec) / bench[1]!.tps, 1)} %`,
        });
      }
      rows.push({
        peer: name,
        measure: 'add → handler start, p50 / p99',
        value: `${round(p.latency.p50, 2)} / ${round(p.latency.p99, 2)} ms`,
        'pg xact/job': '',
        'of pgbench 8 clients': '',
      });
      rows.push({
        peer: name,
        measure: 'chain of 40, step p50 / p99 (per step, total/39)',
        value: `${round(p.chain.stepP50, 2)} / ${round(p.chain.stepP99, 2)} ms (${round(p.chain.perStep, 2)} ms)`,
        'pg xact/job': '',
        'of pgbench 8 clients': '',
      });
    }
    for (const b of bench)
      rows.push({
        peer: `pgbench (PostgreSQL 15 client, server ${serverVersion})`,
        measure: `single-row UPDATE, ${b.clients} client(s), 10 s`,
        value: `${round(b.tps, 0)} commits/s`,
        'pg xact/job': 1,
        'of pgbench 8 clients': `${round((100 * b.tps) / bench[1]!.tps, 1)} %`,
      });
    await report('peers', rows, { jobs: N, postgres: serverVersion, pgbench: bench, graphile, pgBoss: boss });
    await reportRatios();
  });
});
