import { spawn } from 'node:child_process';
import { appendFile, mkdtemp, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import pino from 'pino';
import { describe, expect, it } from 'vitest';
import { createClients } from '../../src/cli/client.js';
import { startEmbeddedPostgres, type EmbeddedPostgres } from '../../src/db/embedded-postgres.js';
import { createSql, type Sql } from '../../src/db/sql.js';
import { freePort } from '../helpers/global-setup.js';
import { ROOT, cli, waitFor } from '../helpers/leoflow-process.js';
import { agentConnected } from './agent-connected.js';
import { profileTop } from './cpu-profile.js';
import { startInstantAgent } from './instant-agent.js';
import { STATS_SETTLE_MS, round, sleep, xacts } from './pg-xacts.js';
import { processCpuMs } from './process-cpu-ms.js';
import { report } from './report.js';
import { runSucceeds } from './run-succeeds.js';
import { applyThroughputDag, queueThroughputRuns } from './throughput-workload.js';

/**
 * Where the time goes, for BENCHMARKS.md's explanations: not part of `npm run bench` (skipped
 * unless LEOFLOW_BENCH_PROFILE=1). An embedded Postgres of its own with pg_stat_statements
 * loaded; the server run with `--cpu-prof`; (1) the throughput workload (2,000 runs of a one-task
 * DAG through an instant agent of 10 slots, queued while paused) and (2) chain-40 through an
 * instant agent (3 runs). For each: SQL statements per task by pg_stat_statements (calls and
 * time), and the server's CPU profile by function (self time).
 *
 *   LEOFLOW_BENCH_PROFILE=1 npx vitest run --config test/bench/vitest.config.ts test/bench/profile.bench.ts
 *
 * LEOFLOW_BENCH_PROFILE_SLOTS (10) and LEOFLOW_BENCH_PROFILE_TASKS (2000) change the throughput
 * workload's concurrency and size; LEOFLOW_BENCH_PROFILE_PG_CONF is appended to the profile's
 * postgresql.conf (e.g. `plan_cache_mode = force_generic_plan`, to compare plans).
 */

const TASKS = Number(process.env.LEOFLOW_BENCH_PROFILE_TASKS ?? 2000);
/** The instant agent's slots in the throughput workload (the peers' concurrency). */
const SLOTS = Number(process.env.LEOFLOW_BENCH_PROFILE_SLOTS ?? 10);
const logger = pino({ level: 'warn' });

interface Statement {
  query: string;
  calls: number;
  ms: number;
  /** Planning time (track_planning is on here): a custom plan per execution shows up only here. */
  planMs: number;
  /** Times planned: equal to calls when every execution gets a custom plan, 0 for a cached generic plan. */
  plans: number;
}

async function statements(sql: Sql): Promise<Statement[]> {
  const rows = await sql<{ query: string; calls: string; ms: number; plan_ms: number; plans: string }[]>`
    select query, calls, plans, total_exec_time as ms, total_plan_time as plan_ms from pg_stat_statements
    where dbid = (select oid from pg_database where datname = current_database())
      and query not ilike '%pg_stat_statements%' and query not ilike '%count(*)::int as n from dag_runs%'`;
  return rows.map((r) => ({
    query: r.query.replace(/\s+/g, ' ').trim(),
    calls: Number(r.calls),
    ms: Number(r.ms),
    planMs: Number(r.plan_ms),
    plans: Number(r.plans),
  }));
}

/** `leoflow server` under `node --cpu-prof` (not allowed in NODE_OPTIONS, so spawned here);
 *  the profile is written when it exits on SIGTERM. */
async function withServer<T>(pgUrl: string, profDir: string, fn: (url: string, pid: number) => Promise<T>): Promise<T> {
  const child = spawn(
    process.execPath,
    [
      '--cpu-prof',
      `--cpu-prof-dir=${profDir}`,
      path.join(ROOT, 'bin/leoflow.js'),
      'server',
      '--listen',
      '127.0.0.1:0',
      '--metrics-listen',
      '127.0.0.1:0',
      '--log-format',
      'json',
      '--heartbeat-interval',
      '1s',
      '--dispatch-workers',
      '16',
      '--dispatch-queue',
      '256',
    ],
    {
      cwd: ROOT,
      env: { ...process.env, DATABASE_URL: pgUrl },
      stdio: ['ignore', 'pipe', 'inherit'],
    },
  );
  const exited = new Promise<number | null>((r) => child.on('exit', (code) => r(code)));
  try {
    const url = await new Promise<string>((resolve, reject) => {
      const t = setTimeout(() => reject(new Error('server not ready in 30 s')), 30_000);
      let buf = '';
      child.stdout!.setEncoding('utf8').on('data', (c: string) => {
        buf += c;
        const m = /"listen":"([^"]+)"[^\n]*ready/.exec(buf);
        if (m) {
          clearTimeout(t);
          resolve(`http://${m[1]}`);
        }
      });
      void exited.then((code) => reject(new Error(`server exited (${code}) before ready`)));
    });
    return await fn(url, child.pid!);
  } finally {
    child.kill('SIGTERM');
    const killer = setTimeout(() => child.kill('SIGKILL'), 30_000);
    expect(await exited).toBe(0);
    clearTimeout(killer);
  }
}

/** CPU time (user + system) a process has used, in ms; 0 for one that is gone. */
const cpuMsOf = (pid: number): Promise<number> => processCpuMs(pid).catch(() => 0);

/**
 * CPU used so far by a Postgres server: its postmaster and every process it started (backends,
 * autovacuum, WAL writer, checkpointer). The profile's samples are wall-clock (time in a
 * syscall while the machine's other core was busy counts), so this is the figure that says
 * which process is short of CPU.
 */
async function postgresCpuMs(pgdata: string): Promise<number> {
  const postmaster = Number((await readFile(path.join(pgdata, 'postmaster.pid'), 'utf8')).split('\n')[0]);
  let total = await cpuMsOf(postmaster);
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const stat = await readFile(`/proc/${entry}/stat`, 'utf8').catch(() => '');
    if (Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]) === postmaster)
      total += await cpuMsOf(Number(entry));
  }
  return total;
}

async function newestProfile(dir: string): Promise<string> {
  const files = await Promise.all(
    (await readdir(dir))
      .filter((f) => f.endsWith('.cpuprofile'))
      .map(async (f) => ({ f: path.join(dir, f), size: (await stat(path.join(dir, f))).size })),
  );
  return files.sort((a, b) => b.size - a.size)[0]!.f; // the main thread's (worker threads' are tiny)
}

function perTask(st: Statement[], tasks: number) {
  const total = st.reduce((n, s) => n + s.calls, 0);
  const rows = [...st]
    .sort((a, b) => b.calls - a.calls)
    .slice(0, 25)
    .map((s) => ({
      'calls/task': round(s.calls / tasks, 2),
      'ms/task': round(s.ms / tasks, 3),
      'plan ms/task': round(s.planMs / tasks, 3),
      statement: s.query.slice(0, 150),
    }));
  return {
    total,
    perTask: total / tasks,
    rows,
    byTime: [...st]
      .sort((a, b) => b.ms + b.planMs - a.ms - a.planMs)
      .slice(0, 10)
      .map((s) => ({
        'ms/task': round(s.ms / tasks, 3),
        'plan ms/task': round(s.planMs / tasks, 3),
        'calls/task': round(s.calls / tasks, 2),
        'planned/call': round(s.plans / Math.max(1, s.calls), 2),
        statement: s.query.slice(0, 150),
      })),
  };
}

describe.skipIf(!process.env.LEOFLOW_BENCH_PROFILE)('profile', () => {
  it('profiles the throughput and chain workloads', async () => {
    const stateDir = await mkdtemp(path.join(os.tmpdir(), 'leoflow-prof-pg-'));
    const tmp = await mkdtemp(path.join(os.tmpdir(), 'leoflow-prof-'));
    const port = await freePort();
    let pg: EmbeddedPostgres | null = await startEmbeddedPostgres({ stateDir, port, logger });
    await pg.stop();
    await appendFile(
      path.join(stateDir, 'pgdata', 'postgresql.conf'),
      "\nshared_preload_libraries = 'pg_stat_statements'\npg_stat_statements.track_planning = on\n" +
        (process.env.LEOFLOW_BENCH_PROFILE_PG_CONF ?? '') +
        '\n',
    );
    pg = await startEmbeddedPostgres({ stateDir, port, logger });
    const sql = createSql(pg.url, { max: 2 });
    try {
      await sql`create extension if not exists pg_stat_statements`;
      const out: Record<string, unknown> = {};

      // (1) throughput
      const tpDir = path.join(tmp, 'tp');
      out.throughput = await withServer(pg.url, tpDir, async (url, serverPid) => {
        await applyThroughputDag(url, tmp, { paused: true });
        const api = createClients(url);
        await queueThroughputRuns(sql, TASKS, 'p_');
        const agent = startInstantAgent(url, { agentId: 'prof', slots: SLOTS });
        try {
          await agentConnected(api);
          await sleep(1500);
          await sql`select pg_stat_statements_reset()`;
          const x0 = await xacts(sql, 'leoflow');
          const [server0, pg0] = [await cpuMsOf(serverPid), await postgresCpuMs(path.join(stateDir, 'pgdata'))];
          const t = performance.now();
          await api.workflow.pauseDag({ dagId: 'tp', paused: false });
          // The database is asked only once the agent has every end acknowledged: a count of the
          // runs every 100 ms was 0.04 ms of Postgres CPU a task, in the figures measured here.
          await waitFor('all ends acknowledged', async () => agent.acked >= TASKS, 600_000, 5);
          await waitFor(
            'all done',
            async () =>
              (await sql<{ n: number }[]>`select count(*)::int as n from dag_runs where state = 'success'`)[0]!.n >=
              TASKS,
            60_000,
            5,
          );
          const secs = (performance.now() - t) / 1000;
          const cpuMsPerTask = {
            server: ((await cpuMsOf(serverPid)) - server0) / TASKS,
            postgres: ((await postgresCpuMs(path.join(stateDir, 'pgdata'))) - pg0) / TASKS,
          };
          await sleep(STATS_SETTLE_MS);
          const xactPerTask = ((await xacts(sql, 'leoflow')) - x0) / TASKS;
          return { seconds: secs, xactPerTask, cpuMsPerTask, ...perTask(await statements(sql), TASKS) };
        } finally {
          await agent.close();
        }
      });
      (out.throughput as Record<string, unknown>).cpu = await profileTop(await newestProfile(tpDir), 20);

      // (2) chain-40 through an instant agent
      const chDir = path.join(tmp, 'chain');
      out.chain = await withServer(pg.url, chDir, async (url) => {
        const lines = ['dag_id: chain', 'tasks:'];
        for (let i = 0; i < 40; i++)
          lines.push(
            `  - id: t${String(i).padStart(2, '0')}`,
            '    executor: agents',
            '    command: ["true"]',
            ...(i ? [`    depends_on: [t${String(i - 1).padStart(2, '0')}]`] : []),
          );
        await writeFile(path.join(tmp, 'chain.yaml'), lines.join('\n') + '\n');
        expect((await cli(url, ['dag', 'apply', path.join(tmp, 'chain.yaml')])).code).toBe(0);
        const api = createClients(url);
        const agent = startInstantAgent(url, { agentId: 'prof-chain', slots: 1 });
        try {
          await agentConnected(api);
          await sleep(1500);
          await sql`select pg_stat_statements_reset()`;
          for (let r = 0; r < 3; r++) {
            const runId = (await api.workflow.triggerRun({ dagId: 'chain' })).run!.runId;
            await runSucceeds(sql, runId, 60_000, 20);
          }
          return perTask(await statements(sql), 120);
        } finally {
          await agent.close();
        }
      });
      (out.chain as Record<string, unknown>).cpu = await profileTop(await newestProfile(chDir), 20);

      const tp = out.throughput as ReturnType<typeof perTask> & {
        cpu: Awaited<ReturnType<typeof profileTop>>;
        seconds: number;
        xactPerTask: number;
        cpuMsPerTask: { server: number; postgres: number };
      };
      const ch = out.chain as ReturnType<typeof perTask> & { cpu: Awaited<ReturnType<typeof profileTop>> };
      await report('profile-throughput-sql', tp.rows, {
        statementsPerTask: tp.perTask,
        xactPerTask: tp.xactPerTask,
        seconds: tp.seconds,
        cpuMsPerTask: tp.cpuMsPerTask,
        byTime: tp.byTime,
      });
      await report('profile-throughput-sql-by-time', tp.byTime);
      await report('profile-throughput-cpu-functions', tp.cpu.functions, { busyMs: tp.cpu.totalMs });
      await report('profile-throughput-cpu-areas', tp.cpu.areas, { busyMs: tp.cpu.totalMs });
      await report('profile-throughput-cpu-attributed', tp.cpu.attributed, { busyMs: tp.cpu.totalMs });
      await report('profile-chain-sql', ch.rows, { statementsPerTask: ch.perTask, byTime: ch.byTime });
      await report('profile-chain-cpu-functions', ch.cpu.functions, { busyMs: ch.cpu.totalMs });
      await report('profile-chain-cpu-attributed', ch.cpu.attributed, { busyMs: ch.cpu.totalMs });
      process.stdout.write(
        `\nthroughput: ${round(tp.xactPerTask, 2)} transactions per task (pg_stat_database, harness polls included); statements per task: throughput ${round(tp.perTask, 1)}, chain ${round(ch.perTask, 1)}; ${TASKS} tasks in ${round(tp.seconds, 1)} s; CPU per task (/proc): server ${round(tp.cpuMsPerTask.server, 2)} ms, Postgres ${round(tp.cpuMsPerTask.postgres, 2)} ms (all its processes); the server's profile saw it busy (wall-clock samples) ${round(tp.cpu.totalMs / 1000, 1)} s\n`,
      );
    } finally {
      await sql.end({ timeout: 5 });
      await pg.stop();
      await rm(stateDir, { recursive: true, force: true });
      await rm(tmp, { recursive: true, force: true });
    }
  });
});
