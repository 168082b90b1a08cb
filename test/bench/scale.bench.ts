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
 * issue's goal case). Ratios to the 0-active run. (2) 5,000 queued runs of one DAG
 * (`max_active_runs: 2`), then a cron run of another DAG: its created → started (Infinity when it
 * has not started 150 s after the apply).
 */

/** Running runs, and how many of them wait on the dispatch queue. */
const ACTIVE: { runs: number; waiting: number }[] = [
  { runs: 0, waiting: 0 },
  { runs: 100, waiting: 0 },
  { runs: 1000, waiting: 0 },
  { runs: 5000, waiting: 0 },
  { runs: 5000, waiting: 1000 },
];
const WINDOW_MS = 20_000;

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
async function withServer<T>(fn: (db: TestDatabase, s: ServerProcess, api: Clients) => Promise<T>): Promise<T> {
  const db = await createTestDatabase();
  let s: ServerProcess | null = null;
  try {
    s = await startServer({ env: { DATABASE_URL: db.url }, quiet: true, args: ['--heartbeat-threshold', '1h'] });
    return await fn(db, s, createClients(s.url));
  } finally {
    await s?.kill();
    await db.drop();
  }
}

async function idleCost(n: number, waiting: number): Promise<Record<string, number>> {
  return withServer(async (db, s, api) => {
    await api.workflow.applyDag(agentsDag('scale', 'max_active_runs: 10000'));
    await runningRuns(db, n, waiting);
    // The first steps read everything once (the new leader offers what waits): not counted.
    await new Promise((r) => setTimeout(r, 5000));
    const [before, cpu0, t0] = [await steps(s), await cpuSeconds(s.child.pid!), performance.now()];
    await new Promise((r) => setTimeout(r, WINDOW_MS));
    const [after, cpu1, t1] = [await steps(s), await cpuSeconds(s.child.pid!), performance.now()];
    const seconds = (t1 - t0) / 1000;
    const count = after.count - before.count;
    return {
      steps: count,
      stepsPerS: count / seconds,
      meanMs: count === 0 ? 0 : ((after.sum - before.sum) / count) * 1000,
      p50Ms: bucketPercentile(before, after, 50),
      p99Ms: bucketPercentile(before, after, 99),
      cpuPct: ((cpu1 - cpu0) / seconds) * 100,
    };
  });
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
    for (const a of ACTIVE) results.push(await idleCost(a.runs, a.waiting));
    const base = results[0]!;
    const rows = ACTIVE.map((a, i) => {
      const r = results[i]!;
      return {
        'active runs': a.waiting > 0 ? `${a.runs} (${a.waiting} waiting on dispatch)` : a.runs,
        'steps/s': round(r.stepsPerS!, 2),
        'step mean ms': round(r.meanMs!, 2),
        'step p50 ≤ ms': r.p50Ms!,
        'step p99 ≤ ms': r.p99Ms!,
        'CPU % of a core': round(r.cpuPct!, 1),
        'mean / 0-active': round(r.meanMs! / Math.max(base.meanMs!, 0.001), 2),
        'CPU / 0-active': round(r.cpuPct! / Math.max(base.cpuPct!, 0.1), 2),
      };
    });
    const behind = await startBehindBacklog();
    await report('scale', rows, { cronRunBehind5000QueuedMs: round(behind, 1) });
    process.stdout.write(
      `a cron run of another DAG behind 5,000 queued runs: created → started ${round(behind, 1)} ms\n`,
    );
    expect(results.every((r) => r.steps! > 0)).toBe(true);
  });
});
