import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { createClients, type Clients } from '../../src/cli/client.js';
import { startServer, waitFor, type ServerProcess } from '../helpers/leoflow-process.js';
import { createTestDatabase, type TestDatabase } from '../helpers/test-database.js';
import { round } from './pg-xacts.js';
import { processCpuMs } from './process-cpu-ms.js';
import { report } from './report.js';
import { bucketPercentile, steps } from './tick-steps.js';

/**
 * scale: what an idle scheduler costs as the number of active runs grows, and whether a backlog
 * of one DAG delays another's. (1) 0 / 100 / 1,000 / 5,000 running runs, each with a task
 * running on an agent (written with SQL; the heartbeat threshold is an hour, so nothing is
 * reaped), and nothing happening: over 20 s, the steps' mean and p50/p99 (from the server's
 * `leoflow_tick_duration_seconds` histogram, so a p is its bucket's upper bound), steps a second, and
 * the server's CPU. Then 5,000 running runs of which 1,000 have their task scheduled and
 * waiting on the dispatch queue (no agent is connected: the queue is full and refuses them, the
 * issue's goal case). And 5,000 running runs while a 100,000-item map runs beside them (subprocess
 * executor, `true`; its items a second in the window). Ratios to the 0-active run. (2) 5,000 queued runs of one DAG
 * (`max_active_runs: 2`), then a cron run of another DAG: its created → started (Infinity when it
 * has not started 150 s after the apply).
 */

/** Running runs, how many of them wait on the dispatch queue, and the items of a map running beside them. */
const ACTIVE: { runs: number; waiting: number; map?: number }[] = [
  { runs: 0, waiting: 0 },
  { runs: 100, waiting: 0 },
  { runs: 1000, waiting: 0 },
  { runs: 5000, waiting: 0 },
  { runs: 5000, waiting: 1000 },
  { runs: 5000, waiting: 0, map: 100_000 },
];
const WINDOW_MS = 20_000;
/** LEOFLOW_BENCH_SCALE_ONLY=map: only the 0-active run and the map's row (no backlog part). */
const ONLY_MAP = process.env.LEOFLOW_BENCH_SCALE_ONLY === 'map';
const ROWS = ONLY_MAP ? ACTIVE.filter((a) => a.runs === 0 || a.map) : ACTIVE;

/** The running runs of `scale`: the newest `waiting` with their one task scheduled (to offer;
 *  no agent is connected, so the dispatch queue stays full), the others with it running on agent
 *  `ghost`. */
async function runningRuns(db: TestDatabase, n: number, waiting: number): Promise<void> {
  if (n === 0) return;
  await db.sql`
    insert into dag_runs (dag_id, run_key, run_type, dag_version, logical_date, state, started_at)
    select d.dag_id, 'bulk__' || g, 'manual', d.version, now(), 'running', now()
    from dags d, generate_series(1, ${n}) g where d.dag_id = 'scale'`;
  await db.sql`
    insert into task_instances (run_id, task_id, try_number, max_tries, state, attempt_token, executor, agent_id, queued_at, started_at, heartbeat_at)
    select r.id, 'a', 1, 1, 'running', gen_random_uuid(), 'agents', 'ghost', now(), now(), now()
    from dag_runs r where r.dag_id = 'scale' order by r.id limit ${n - waiting}`;
  await db.sql`
    insert into task_instances (run_id, task_id, max_tries, state, executor)
    select r.id, 'a', 1, 'scheduled', 'agents'
    from dag_runs r where r.dag_id = 'scale' and not exists (select 1 from task_instances t where t.run_id = r.id)`;
  await db.sql`analyze`;
}

const cpuSeconds = async (pid: number) => (await processCpuMs(pid)) / 1000;

/** A DAG of one task (`a`, on agents, `true`), `settings` (max_active_runs, schedule) before its tasks. */
const agentsDag = (dagId: string, settings: string) => ({
  source: `dag_id: ${dagId}\n${settings}\ntasks:\n  - id: a\n    executor: agents\n    command: ["true"]\n`,
  filename: `${dagId}.yaml`,
});

/** Runs `fn` with a database of its own and a server on it that reaps nothing (the heartbeat
 *  threshold is an hour), killed after. */
async function withServer<T>(
  fn: (db: TestDatabase, s: ServerProcess, api: Clients) => Promise<T>,
  args: string[] = [],
): Promise<T> {
  const db = await createTestDatabase();
  let s: ServerProcess | null = null;
  try {
    s = await startServer({
      env: { DATABASE_URL: db.url },
      quiet: true,
      args: ['--heartbeat-threshold', '1h', ...args],
    });
    return await fn(db, s, createClients(s.url));
  } finally {
    await s?.kill();
    await db.drop();
  }
}

/**
 * A run of a DAG whose `gen` lists `items` numbers and whose `each` maps over them (`true`, on the
 * subprocess executor), started and expanded: the "while a map runs".
 */
async function startMap(db: TestDatabase, api: Clients, items: number): Promise<string> {
  const gen = `seq 0 $((${items} - 1)) | paste -sd, - | sed 's/^/{"items":[/; s/$/]}/' > "$LEOFLOW_OUTPUT"`;
  await api.workflow.applyDag({
    source: [
      'dag_id: fan',
      'tasks:',
      '  - id: gen',
      `    command: ${JSON.stringify(['sh', '-c', gen])}`,
      '  - id: each',
      '    command: ["true"]',
      '    depends_on: [gen]',
      '    map: { over: gen.items }',
      '',
    ].join('\n'),
    filename: 'fan.yaml',
  });
  const { run } = await api.workflow.triggerRun({ dagId: 'fan', confJson: '', runKey: '' });
  await waitFor(
    `the map of ${items} items expanded and running`,
    async () => ((await mappedDone(db, run!.runId)) > 0 ? true : null),
    120_000,
    200,
  );
  return run!.runId;
}

async function mappedDone(db: TestDatabase, runId: string): Promise<number> {
  const [r] = await db.sql<{ n: number }[]>`
    select count(*)::int as n from task_instances where run_id = ${runId} and map_parent is not null and state = 'success'`;
  return r!.n;
}

function rssMiB(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) / 1024 : 0;
}

async function idleCost(n: number, waiting: number, map = 0): Promise<Record<string, number>> {
  // A 100,000-item list is ~590 KB of output, past the 64 KiB default.
  const args = map > 0 ? ['--max-output-size', '1MiB'] : [];
  return withServer(async (db, s, api) => {
    await api.workflow.applyDag(agentsDag('scale', 'max_active_runs: 10000'));
    await runningRuns(db, n, waiting);
    const mapRun = map > 0 ? await startMap(db, api, map) : null;
    // The first steps read everything once (the new leader offers what waits): not counted.
    await new Promise((r) => setTimeout(r, 5000));
    const done0 = mapRun ? await mappedDone(db, mapRun) : 0;
    const [before, cpu0, t0] = [await steps(s), await cpuSeconds(s.child.pid!), performance.now()];
    await new Promise((r) => setTimeout(r, WINDOW_MS));
    const [after, cpu1, t1] = [await steps(s), await cpuSeconds(s.child.pid!), performance.now()];
    const seconds = (t1 - t0) / 1000;
    const count = after.count - before.count;
    const done1 = mapRun ? await mappedDone(db, mapRun) : 0;
    return {
      itemsPerS: (done1 - done0) / seconds,
      rssMiB: rssMiB(s.child.pid!),
      steps: count,
      stepsPerS: count / seconds,
      meanMs: count === 0 ? 0 : ((after.sum - before.sum) / count) * 1000,
      p50Ms: bucketPercentile(before, after, 50),
      p99Ms: bucketPercentile(before, after, 99),
      cpuPct: ((cpu1 - cpu0) / seconds) * 100,
    };
  }, args);
}

/** 5,000 queued runs of one DAG, then a cron run of another: its created → started. */
async function startBehindBacklog(): Promise<number> {
  return withServer(async (db, _s, api) => {
    await api.workflow.applyDag(agentsDag('backlog', 'max_active_runs: 2'));
    await db.sql`
      insert into dag_runs (dag_id, run_key, run_type, dag_version, logical_date)
      select d.dag_id, 'bulk__' || g, 'manual', d.version, now() from dags d, generate_series(1, 5000) g where d.dag_id = 'backlog'`;
    await db.sql`
      insert into task_instances (run_id, task_id, max_tries, executor)
      select r.id, 'a', 1, 'agents' from dag_runs r where r.dag_id = 'backlog'`;
    await db.sql`analyze`;
    await api.workflow.applyDag(agentsDag('cron_late', 'schedule: "* * * * *"'));
    // Infinity: not started within the bound (a cron run is created within a minute of the apply).
    let ms = Infinity;
    await waitFor(
      'the cron run started',
      async () => {
        const [r] = await db.sql<{ ms: number | null }[]>`
        select extract(epoch from started_at - created_at) * 1000 as ms from dag_runs where dag_id = 'cron_late' order by id limit 1`;
        if (r?.ms === null || r?.ms === undefined) return false;
        ms = Number(r.ms);
        return true;
      },
      150_000,
      100,
    ).catch(() => {});
    return ms;
  });
}

describe('scale', () => {
  it("measures the idle step cost as active runs grow, and a start behind another DAG's backlog", async () => {
    const results: Record<string, number>[] = [];
    for (const a of ROWS) results.push(await idleCost(a.runs, a.waiting, a.map));
    const base = results[0]!;
    const rows = ROWS.map((a, i) => {
      const r = results[i]!;
      return {
        'active runs':
          a.waiting > 0
            ? `${a.runs} (${a.waiting} waiting on dispatch)`
            : a.map
              ? `${a.runs} + a ${a.map}-item map (${round(r.itemsPerS!, 1)} items/s)`
              : a.runs,
        'steps/s': round(r.stepsPerS!, 2),
        'step mean ms': round(r.meanMs!, 2),
        'step p50 ≤ ms': r.p50Ms!,
        'step p99 ≤ ms': r.p99Ms!,
        'CPU % of a core': round(r.cpuPct!, 1),
        'mean / 0-active': round(r.meanMs! / Math.max(base.meanMs!, 0.001), 2),
        'CPU / 0-active': round(r.cpuPct! / Math.max(base.cpuPct!, 0.1), 2),
        'server RSS MiB': round(r.rssMiB!, 0),
      };
    });
    const behind = ONLY_MAP ? NaN : await startBehindBacklog();
    await report('scale', rows, { cronRunBehind5000QueuedMs: round(behind, 1) });
    process.stdout.write(
      `a cron run of another DAG behind 5,000 queued runs: created → started ${round(behind, 1)} ms\n`,
    );
    expect(results.every((r) => r.steps! > 0)).toBe(true);
  });
});
