import { spawn, type ChildProcess } from 'node:child_process';
import { copyFile, mkdtemp, readdir, rm, stat } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { createClients } from '../../src/cli/client.js';
import { BIN, ROOT, scratchDir, startServer } from '../helpers/leoflow-process.js';
import { createTestDatabase } from '../helpers/test-database.js';
import { agentConnected } from './agent-connected.js';
import { profileTop } from './cpu-profile.js';
import { round, sleep } from './pg-xacts.js';
import { processCpuMs } from './process-cpu-ms.js';
import { report } from './report.js';
import { applyThroughputDag, queueThroughputRuns } from './throughput-workload.js';

/**
 * agent-tasks: how many `true` tasks a second one real `leoflow agent` process runs, and what each
 * costs that agent in CPU. N runs of a one-task DAG (`executor: agents`, `true`) are queued while
 * the DAG is paused (as in throughput.bench.ts), the agent connects with C slots, the DAG is
 * unpaused, and the rate is read from the rows (first task's `started_at` → last run's
 * `ended_at`, server clock). The agent's CPU (user + system, its own thread pool included, its
 * children not) is read from /proc over the window.
 *
 *   npx vitest run --config test/bench/vitest.config.ts test/bench/agent-tasks.bench.ts
 *
 * LEOFLOW_BENCH_AGENT_TASKS (10000), LEOFLOW_BENCH_AGENT_CONCURRENCY ("10,50"),
 * LEOFLOW_BENCH_AGENT_PROFILE=1 runs the agent under `node --cpu-prof` and prints where its main
 * thread spent its time (self time by function and by area); LEOFLOW_BENCH_AGENT_PROFILE_TO=FILE
 * keeps the profile (for a viewer, or to see who calls what).
 */

const N = Number(process.env.LEOFLOW_BENCH_AGENT_TASKS ?? 10_000);
const CONCURRENCY = (process.env.LEOFLOW_BENCH_AGENT_CONCURRENCY ?? '10,50').split(',').map(Number);
const PROFILE = process.env.LEOFLOW_BENCH_AGENT_PROFILE === '1';
const WINDOW_LIMIT_MS = 240_000;

/** A `leoflow agent` process, under `--cpu-prof` when profiling (not allowed in NODE_OPTIONS). */
function agentProcess(
  url: string,
  slots: number,
  profDir: string | null,
): { child: ChildProcess; exited: Promise<number | null> } {
  const prof = profDir ? ['--cpu-prof', `--cpu-prof-dir=${profDir}`] : [];
  const args = [
    ...prof,
    BIN,
    '--server',
    url,
    'agent',
    '--id',
    `bench-agent-${slots}`,
    '--slots',
    String(slots),
    '--log-level',
    'warn',
    '--state-dir',
    scratchDir('leoflow-bench-agent-'),
  ];
  const child = spawn(process.execPath, args, { cwd: ROOT, stdio: ['ignore', 'ignore', 'inherit'] });
  return { child, exited: new Promise((r) => child.on('exit', (code) => r(code))) };
}

interface Measured {
  concurrency: number;
  done: number;
  tasksPerSec: number;
  agentCpuMsPerTask: number;
  windowMs: number;
  load: number;
  profile: Awaited<ReturnType<typeof profileTop>> | null;
}

async function measure(c: number): Promise<Measured> {
  const tmp = await mkdtemp(path.join(os.tmpdir(), 'leoflow-bench-at-'));
  const db = await createTestDatabase();
  const s = await startServer({
    env: { DATABASE_URL: db.url },
    args: ['--heartbeat-interval', '1s', '--dispatch-workers', '16', '--dispatch-queue', '256'],
    quiet: true,
  });
  const profDir = PROFILE ? await mkdtemp(path.join(os.tmpdir(), 'leoflow-bench-at-prof-')) : null;
  let agent: ReturnType<typeof agentProcess> | null = null;
  try {
    await applyThroughputDag(s.url, tmp, { paused: true });
    const api = createClients(s.url);
    await queueThroughputRuns(db.sql, N, 'bench_');
    agent = agentProcess(s.url, c, profDir);
    await agentConnected(api);
    await sleep(1000);
    const cpu0 = await processCpuMs(agent.child.pid!);
    const load = os.loadavg()[0]!;
    await api.workflow.pauseDag({ dagId: 'tp', paused: false });
    const deadline = performance.now() + WINDOW_LIMIT_MS;
    while (performance.now() < deadline) {
      const [r] = await db.sql<{ n: number }[]>`select count(*)::int as n from dag_runs where state = 'success'`;
      if (r!.n >= N) break;
      await sleep(250);
    }
    const cpu1 = await processCpuMs(agent.child.pid!);
    const [w] = await db.sql<{ ms: number; done: number }[]>`
      select extract(epoch from max(r.ended_at) - min(t.started_at)) * 1000 as ms, count(*) filter (where r.state = 'success')::int as done
      from dag_runs r join task_instances t on t.run_id = r.id where t.started_at is not null`;
    agent.child.kill('SIGTERM');
    expect(await agent.exited).toBe(0);
    let profile = null;
    if (profDir) {
      const files = await Promise.all(
        (await readdir(profDir)).map(async (f) => ({
          f: path.join(profDir, f),
          size: (await stat(path.join(profDir, f))).size,
        })),
      );
      const main = files.sort((a, b) => b.size - a.size)[0]!.f;
      profile = await profileTop(main, 15);
      if (process.env.LEOFLOW_BENCH_AGENT_PROFILE_TO) await copyFile(main, process.env.LEOFLOW_BENCH_AGENT_PROFILE_TO);
    }
    return {
      concurrency: c,
      done: w!.done,
      tasksPerSec: w!.done / (Number(w!.ms) / 1000),
      agentCpuMsPerTask: (cpu1 - cpu0) / w!.done,
      windowMs: Number(w!.ms),
      load,
      profile,
    };
  } finally {
    if (agent && agent.child.exitCode === null) {
      agent.child.kill('SIGKILL');
      await agent.exited;
    }
    await s.stop();
    await db.drop();
    await rm(tmp, { recursive: true, force: true });
    if (profDir) await rm(profDir, { recursive: true, force: true });
  }
}

describe('agent-tasks', () => {
  it(`runs ${N} \`true\` tasks through one leoflow agent process`, async () => {
    const results: Measured[] = [];
    for (const c of CONCURRENCY) results.push(await measure(c));
    for (const r of results) {
      if (!r.profile) continue;
      process.stdout.write(
        `\n== agent main thread at concurrency ${r.concurrency}: ${round(r.profile.totalMs, 0)} ms busy in a ${round(r.windowMs, 0)} ms window\n`,
      );
      console.table(r.profile.functions);
      console.table(r.profile.areas);
    }
    await report(
      'agent-tasks',
      results.map((r) => ({
        concurrency: r.concurrency,
        'tasks done': `${r.done}/${N}`,
        'tasks/s': round(r.tasksPerSec, 0),
        'agent CPU ms/task': round(r.agentCpuMsPerTask, 3),
        'window s': round(r.windowMs / 1000, 1),
        'load (1 min) at start': round(r.load, 2),
      })),
      {
        model: `${N} runs of a one-task DAG (executor: agents, command true), one leoflow agent process`,
        results: results.map(({ profile: _p, ...r }) => r),
      },
    );
  });
});
