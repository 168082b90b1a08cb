import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { createClients } from '../../src/cli/client.js';
import { cli, startAgent, startServer, type AgentProcess, type ServerProcess } from '../helpers/leoflow-process.js';
import { scrapeMetrics } from '../helpers/scrape-metrics.js';
import { createTestDatabase, type TestDatabase } from '../helpers/test-database.js';
import { agentConnected } from './agent-connected.js';
import { benchTracing } from './bench-tracing.js';
import { median, round } from './pg-xacts.js';
import { reportRatios } from './ratios.js';
import { percentile, report } from './report.js';
import { runSucceeds } from './run-succeeds.js';

/**
 * chain-40: one DAG of 40 sequential no-op tasks (`true`), run 3 times with (a) the subprocess
 * executor (the server's default) and (b) one real `leoflow agent` process (--slots 1). By the
 * server's clock (task_instances timestamps): per-task overhead = task i's ended_at → task i+1's
 * started_at (39 gaps per run), and start → next start (overhead plus the task itself: spawn and
 * `true`). Medians of the 3 runs' p50/p99/totals. The same chains again with tasks that run 20 ms
 * (`sleep 0.02`), for what a start costs when its task is not a no-op.
 */

const TASKS = 40;
const REPS = 3;

/** The no-op of the issue, and a task that runs a while (20 ms): a start's own costs can hide
 *  behind a task that runs (the ready shell is made then: src/executors/process/ready-shell.ts), not
 *  behind one that ends at once. */
const NO_OP = '["true"]';
const RUNS_20MS = '["sleep", "0.02"]';
/**
 * LEOFLOW_BENCH_CHAIN_OUTPUTS=off|on: the chains' no-op becomes a shell that writes nothing (off) or
 * writes a small output every downstream reads as its inputs (on), for the cost of outputs (A/B).
 */
const OUTPUTS = process.env.LEOFLOW_BENCH_CHAIN_OUTPUTS;
const CHAIN_COMMAND =
  OUTPUTS === 'on'
    ? JSON.stringify(['sh', '-c', 'echo \'{"n": 1}\' > "$LEOFLOW_OUTPUT"'])
    : OUTPUTS === 'off'
      ? JSON.stringify(['sh', '-c', ':'])
      : NO_OP;

function chainYaml(dagId: string, executor: 'default' | 'agents', command = CHAIN_COMMAND): string {
  const lines = [`dag_id: ${dagId}`, 'max_active_runs: 1', 'tasks:'];
  for (let i = 0; i < TASKS; i++) {
    lines.push(`  - id: t${String(i).padStart(2, '0')}`, `    command: ${command}`);
    if (executor === 'agents') lines.push('    executor: agents');
    if (i > 0) lines.push(`    depends_on: [t${String(i - 1).padStart(2, '0')}]`);
  }
  return lines.join('\n') + '\n';
}

interface RepResult {
  totalMs: number;
  firstStartToLastEndMs: number;
  gapP50: number;
  gapP99: number;
  startToStartP50: number;
  /** Of the overhead: task i ended → task i+1 claimed (queued_at): the scheduler step and placement. */
  finishToClaimP50: number;
  /** Of the overhead: claimed → Started recorded: delivery (Assign or spawn) and the start write. */
  claimToStartP50: number;
}

async function runChain(db: TestDatabase, s: ServerProcess, dagId: string): Promise<RepResult> {
  const api = createClients(s.url);
  const runId = (await api.workflow.triggerRun({ dagId })).run!.runId;
  await runSucceeds(db.sql, runId, 60_000, 20);
  const tis = await db.sql<{ started: number; ended: number; queued: number }[]>`
    select extract(epoch from started_at) * 1000 as started, extract(epoch from ended_at) * 1000 as ended, extract(epoch from queued_at) * 1000 as queued
    from task_instances where run_id = ${runId} order by task_id`;
  const [run] = await db.sql<
    { total: number }[]
  >`select extract(epoch from ended_at - created_at) * 1000 as total from dag_runs where id = ${runId}`;
  expect(tis).toHaveLength(TASKS);
  const gaps: number[] = [];
  const starts: number[] = [];
  const toClaim: number[] = [];
  const toStart: number[] = [];
  for (let i = 1; i < TASKS; i++) {
    gaps.push(Number(tis[i]!.started) - Number(tis[i - 1]!.ended));
    toClaim.push(Number(tis[i]!.queued) - Number(tis[i - 1]!.ended));
    toStart.push(Number(tis[i]!.started) - Number(tis[i]!.queued));
    starts.push(Number(tis[i]!.started) - Number(tis[i - 1]!.started));
  }
  return {
    totalMs: Number(run!.total),
    firstStartToLastEndMs: Number(tis[TASKS - 1]!.ended) - Number(tis[0]!.started),
    gapP50: percentile(gaps, 50),
    gapP99: percentile(gaps, 99),
    startToStartP50: percentile(starts, 50),
    finishToClaimP50: percentile(toClaim, 50),
    claimToStartP50: percentile(toStart, 50),
  };
}

function summarize(mode: string, reps: RepResult[]) {
  const m = (k: keyof RepResult) => round(median(reps.map((r) => r[k])), 2);
  return {
    executor: mode,
    'overhead p50 ms': m('gapP50'),
    'overhead p99 ms': m('gapP99'),
    'of which end→claim p50': m('finishToClaimP50'),
    'claim→started p50': m('claimToStartP50'),
    'start→start p50 ms': m('startToStartP50'),
    'trigger→success ms': round(median(reps.map((r) => r.totalMs)), 0),
    'first start→last end ms': round(median(reps.map((r) => r.firstStartToLastEndMs)), 0),
    'per task (total/40) ms': round(median(reps.map((r) => r.totalMs)) / TASKS, 2),
  };
}

describe('chain-40', () => {
  it('measures per-task overhead, subprocess and standalone agent', async () => {
    const tmp = await mkdtemp(path.join(os.tmpdir(), 'leoflow-bench-chain-'));
    const db = await createTestDatabase();
    let s: ServerProcess | null = null;
    let agent: AgentProcess | null = null;
    const tracing = await benchTracing();
    try {
      await writeFile(path.join(tmp, 'chain_sub.yaml'), chainYaml('chain_sub', 'default'));
      await writeFile(path.join(tmp, 'chain_agent.yaml'), chainYaml('chain_agent', 'agents'));
      await writeFile(path.join(tmp, 'chain_sub_20ms.yaml'), chainYaml('chain_sub_20ms', 'default', RUNS_20MS));
      await writeFile(path.join(tmp, 'chain_agent_20ms.yaml'), chainYaml('chain_agent_20ms', 'agents', RUNS_20MS));
      // The server's defaults (Lite: subprocess executor, 1 dispatch worker, queue 1, 1 s tick).
      s = await startServer({ env: { DATABASE_URL: db.url }, args: tracing.args });
      expect((await cli(s.url, ['dag', 'apply', tmp])).code).toBe(0);
      agent = startAgent(s.url, ['--id', 'bench-chain', '--slots', '1']);
      await agentConnected(createClients(s.url));

      // One warm-up run of each, not counted: statements prepared, code paths compiled.
      await runChain(db, s, 'chain_sub');
      await runChain(db, s, 'chain_agent');
      await runChain(db, s, 'chain_sub_20ms');
      await runChain(db, s, 'chain_agent_20ms');
      const startsBefore = await scrapeMetrics(s.metricsUrl);
      const sub: RepResult[] = [];
      const viaAgent: RepResult[] = [];
      const sub20: RepResult[] = [];
      const viaAgent20: RepResult[] = [];
      for (let i = 0; i < REPS; i++) {
        sub.push(await runChain(db, s, 'chain_sub'));
        viaAgent.push(await runChain(db, s, 'chain_agent'));
        sub20.push(await runChain(db, s, 'chain_sub_20ms'));
        viaAgent20.push(await runChain(db, s, 'chain_agent_20ms'));
      }
      const startsAfter = await scrapeMetrics(s.metricsUrl);
      const starts = Object.fromEntries(
        [...startsAfter]
          .filter(([k]) => k.startsWith('leoflow_task_starts_total{'))
          .map(([k, v]) => [k.slice('leoflow_task_starts_total'.length), v - (startsBefore.get(k) ?? 0)]),
      );
      console.log('server starts by how', JSON.stringify(starts));
      if (tracing.on) console.log(`tracing on: ${tracing.spans()} spans received so far`);
      const rows = [
        summarize('subprocess (server default)', sub),
        summarize('standalone agent (leoflow agent --slots 1)', viaAgent),
        summarize('subprocess, tasks of 20 ms (sleep 0.02)', sub20),
        summarize('standalone agent, tasks of 20 ms (sleep 0.02)', viaAgent20),
      ];
      await report('chain40', rows, {
        tasks: TASKS,
        repetitions: REPS,
        definition:
          'overhead = task_instances.ended_at of task i → started_at of task i+1 (server clock), split at task i+1 queued_at (its claim); medians over the repetitions',
        reps: { subprocess: sub, agent: viaAgent, subprocess20ms: sub20, agent20ms: viaAgent20 },
        serverStartsByHow: starts,
        tracing: tracing.on ? { on: true, spansReceived: tracing.spans() } : { on: false },
        summary: {
          subprocess: {
            overheadP50: median(sub.map((r) => r.gapP50)),
            overheadP99: median(sub.map((r) => r.gapP99)),
            startToStartP50: median(sub.map((r) => r.startToStartP50)),
          },
          agent: {
            overheadP50: median(viaAgent.map((r) => r.gapP50)),
            overheadP99: median(viaAgent.map((r) => r.gapP99)),
            startToStartP50: median(viaAgent.map((r) => r.startToStartP50)),
          },
          subprocess20ms: {
            overheadP50: median(sub20.map((r) => r.gapP50)),
            startToStartP50: median(sub20.map((r) => r.startToStartP50)),
          },
          agent20ms: {
            overheadP50: median(viaAgent20.map((r) => r.gapP50)),
            startToStartP50: median(viaAgent20.map((r) => r.startToStartP50)),
          },
        },
      });
      await reportRatios();
    } finally {
      await agent?.stop();
      await s?.stop();
      await tracing.close();
      await db.drop();
      await rm(tmp, { recursive: true, force: true });
    }
  });
});
