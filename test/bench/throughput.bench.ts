import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { describe, it } from 'vitest';
import { createClients } from '../../src/cli/client.js';
import { startAgent, startServer, type AgentProcess, type ServerProcess } from '../helpers/leoflow-process.js';
import { createTestDatabase, type TestDatabase } from '../helpers/test-database.js';
import { agentConnected } from './agent-connected.js';
import { startInstantAgent, type InstantAgent } from './instant-agent.js';
import { STATS_SETTLE_MS, round, sleep, xacts } from './pg-xacts.js';
import { reportRatios } from './ratios.js';
import { benchTracing } from './bench-tracing.js';
import { percentile, report } from './report.js';
import { applyThroughputDag, queueThroughputRuns } from './throughput-workload.js';

/**
 * throughput: N independent no-op tasks through standalone agents, as N runs of a one-task DAG
 * (one run = one job of the peers: its own row, trigger, state history and events). The runs are
 * triggered while the DAG is paused (the peers' jobs are likewise all queued first), then the DAG
 * is unpaused with the agents already connected, and the clock runs by the server's timestamps
 * from the first task started to the last run ended. Agents: one protocol-level agent answering
 * at once (the peers' no-op handler), and one real `leoflow agent` process running `true`; the
 * agent's slots are the concurrency, as the peers' worker concurrency.
 * Postgres transactions per task: pg_stat_database delta of the test database over the window,
 * less the harness's own queries, divided by N.
 * Then a latency run like the peers': 200 runs triggered one at a time, TriggerRun called →
 * Assign received by the agent (both on the harness's clock).
 */

const N = Number(process.env.LEOFLOW_BENCH_TASKS ?? 10_000);
const CONCURRENCY = (process.env.LEOFLOW_BENCH_CONCURRENCY ?? '10,50').split(',').map(Number);
const LATENCY_SAMPLES = Number(process.env.LEOFLOW_BENCH_LATENCY_SAMPLES ?? 200);
const TRIGGER_SAMPLES = 1000;
const KINDS = (process.env.LEOFLOW_BENCH_AGENTS ?? 'instant,process').split(',') as ('instant' | 'process')[];
/** Bound on one throughput window; a configuration that has not finished by then is reported with what it did. */
const WINDOW_LIMIT_MS = Number(process.env.LEOFLOW_BENCH_WINDOW_MS ?? 240_000);
/** How often the harness asks the database whether the window is over. The window itself is read
 *  from the rows' timestamps afterwards, so this bounds only how soon the harness notices. */
const POLL_MS = 250;
/** How often it looks at the instant agent's count of acknowledged ends (in-process, free). */
const ACK_POLL_MS = 5;
/** Pro's pool (16 drainers, queue 256) and a 1 s tick; see BENCHMARKS.md for why. The server logs
 *  at warn (`quiet`): the peers run with their loggers silenced, and at info the server writes two
 *  lines per task, which the harness (the same process as the instant agent) reads and parses. */
const SERVER_ARGS = (process.env.LEOFLOW_BENCH_SERVER_ARGS ?? '--dispatch-workers 16 --dispatch-queue 256')
  .split(' ')
  .filter(Boolean);
const MAX_ACTIVE_RUNS = Number(process.env.LEOFLOW_BENCH_MAX_ACTIVE_RUNS ?? 100_000);

interface Setup {
  db: TestDatabase;
  s: ServerProcess;
  tmp: string;
  close(): Promise<void>;
}

async function setup(paused: boolean): Promise<Setup> {
  const tmp = await mkdtemp(path.join(os.tmpdir(), 'leoflow-bench-tp-'));
  const db = await createTestDatabase();
  const tracing = await benchTracing();
  let s: ServerProcess | null = null;
  try {
    s = await startServer({
      env: { DATABASE_URL: db.url },
      // The TriggerRun rate row measures what the API can take, not the default per-client bound (200 a second).
      args: ['--heartbeat-interval', '1s', '--max-token-writes', '100000', ...SERVER_ARGS, ...tracing.args],
      quiet: true,
    });
    await applyThroughputDag(s.url, tmp, { paused, maxActiveRuns: MAX_ACTIVE_RUNS });
  } catch (err) {
    await s?.stop();
    await db.drop();
    await tracing.close();
    throw err;
  }
  const server = s;
  return {
    db,
    s: server,
    tmp,
    async close() {
      await server.stop();
      if (tracing.on) console.log(`tracing on: ${tracing.spans()} spans received`);
      await tracing.close();
      await db.drop();
      await rm(tmp, { recursive: true, force: true });
    },
  };
}

/** Triggers n runs through the API, `inFlight` at a time; returns runs/s. */
async function triggerMany(url: string, n: number, inFlight = 16): Promise<number> {
  const api = createClients(url);
  const t = performance.now();
  let next = 0;
  await Promise.all(
    Array.from({ length: inFlight }, async () => {
      while (next < n) {
        next++;
        await api.workflow.triggerRun({ dagId: 'tp' });
      }
    }),
  );
  return n / ((performance.now() - t) / 1000);
}

interface Measured {
  agent: string;
  concurrency: number;
  tasks: number;
  done: number;
  tasksPerSec: number;
  xactPerTask: number;
  windowMs: number;
}

async function measureThroughput(kind: 'instant' | 'process', c: number): Promise<Measured> {
  const env = await setup(true);
  let instant: InstantAgent | null = null;
  let proc: AgentProcess | null = null;
  try {
    await queueThroughputRuns(env.db.sql, N, 'bench_');
    const api = createClients(env.s.url);
    if (kind === 'instant') instant = startInstantAgent(env.s.url, { agentId: `bench-instant-${c}`, slots: c });
    else proc = startAgent(env.s.url, ['--id', `bench-agent-${c}`, '--slots', String(c), '--log-level', 'warn']);
    await agentConnected(api);
    await sleep(STATS_SETTLE_MS);
    const x0 = await xacts(env.db.sql, env.db.name);
    let own = 0;
    await api.workflow.pauseDag({ dagId: 'tp', paused: false });
    const deadline = performance.now() + WINDOW_LIMIT_MS;
    let done = 0;
    while (performance.now() < deadline) {
      // The instant agent counts the ends the server acknowledged, so the database is asked only
      // once they are all written, as graphile-worker's harness does (a count of 10,000 runs every
      // 50 ms was 0.08 ms of Postgres CPU a task, ~13 % of Leoflow's own, in the window it measures).
      if (instant && instant.acked < N) {
        await sleep(ACK_POLL_MS);
        continue;
      }
      own++;
      const [r] = await env.db.sql<{ n: number }[]>`select count(*)::int as n from dag_runs where state = 'success'`;
      done = r!.n;
      if (done >= N) break;
      await sleep(instant ? ACK_POLL_MS : POLL_MS);
    }
    await sleep(STATS_SETTLE_MS);
    const x1 = await xacts(env.db.sql, env.db.name);
    own++; // the x1 reading itself
    const [w] = await env.db.sql<{ ms: number; done: number }[]>`
      select extract(epoch from max(r.ended_at) - min(t.started_at)) * 1000 as ms, count(*) filter (where r.state = 'success')::int as done
      from dag_runs r join task_instances t on t.run_id = r.id where t.started_at is not null`;
    const windowMs = Number(w!.ms);
    return {
      agent: kind === 'instant' ? 'instant (protocol-level)' : 'leoflow agent process, `true`',
      concurrency: c,
      tasks: N,
      done: w!.done,
      tasksPerSec: w!.done / (windowMs / 1000),
      xactPerTask: (x1 - x0 - own) / w!.done,
      windowMs,
    };
  } finally {
    await instant?.close();
    await proc?.stop();
    await env.close();
  }
}

async function measureLatency(): Promise<{ latency: number[]; triggerPerSec: number }> {
  const env = await setup(false);
  let waiting: ((at: number) => void) | null = null;
  const agent = startInstantAgent(env.s.url, {
    agentId: 'bench-latency',
    slots: 10,
    onAssign: (_ti, at) => waiting?.(at),
  });
  try {
    const api = createClients(env.s.url);
    await agentConnected(api);
    const out: number[] = [];
    for (let i = 0; i < LATENCY_SAMPLES + 10; i++) {
      const assigned = new Promise<number>((resolve, reject) => {
        const t = setTimeout(() => reject(new Error('no Assign within 10 s')), 10_000);
        waiting = (at) => (clearTimeout(t), resolve(at));
      });
      const t0 = performance.now();
      await api.workflow.triggerRun({ dagId: 'tp' });
      const at = await assigned;
      if (i >= 10) out.push(at - t0); // the first 10 warm up
      // Let the run finish (its Finished recorded, the run finalized) before the next trigger.
      await sleep(20);
    }
    // TriggerRun's own rate, 16 calls in flight, with the agent taking the runs meanwhile.
    const triggerPerSec = await triggerMany(env.s.url, TRIGGER_SAMPLES);
    return { latency: out, triggerPerSec };
  } finally {
    await agent.close();
    await env.close();
  }
}

describe('throughput', () => {
  it(`runs ${N} no-op tasks through standalone agents`, async () => {
    const results: Measured[] = [];
    for (const c of CONCURRENCY) {
      for (const kind of KINDS) results.push(await measureThroughput(kind, c));
    }
    const { latency, triggerPerSec } = await measureLatency();
    const rows = results.map((r) => ({
      agent: r.agent,
      concurrency: r.concurrency,
      'tasks done': `${r.done}/${r.tasks}`,
      'tasks/s': round(r.tasksPerSec, 0),
      'pg xact/task': round(r.xactPerTask, 2),
      'window s': round(r.windowMs / 1000, 1),
    }));
    await report('throughput', rows, {
      serverArgs: SERVER_ARGS,
      tracing: process.env.LEOFLOW_BENCH_OTLP === '1',
      maxActiveRuns: MAX_ACTIVE_RUNS,
      model: `${N} runs of a one-task DAG (executor: agents, command true)`,
      results,
      triggerApi: { runs: TRIGGER_SAMPLES, inFlight: 16, runsPerSec: triggerPerSec },
      latency: {
        samples: latency.length,
        p50: percentile(latency, 50),
        p99: percentile(latency, 99),
        definition: 'TriggerRun called → Assign received by a connected protocol-level agent, one run at a time',
      },
    });
    await report('throughput-latency', [
      {
        measure: 'TriggerRun called → Assign received (connected agent)',
        'p50 ms': round(percentile(latency, 50), 2),
        'p99 ms': round(percentile(latency, 99), 2),
        samples: latency.length,
      },
      {
        measure: `TriggerRun API rate, ${TRIGGER_SAMPLES} runs, 16 in flight (runs/s)`,
        'p50 ms': round(triggerPerSec, 0),
        'p99 ms': '',
        samples: TRIGGER_SAMPLES,
      },
    ]);
    await reportRatios();
  });
});
