import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { inject } from 'vitest';
import { ROOT } from '../helpers/leoflow-process.js';
import { round } from './pg-xacts.js';
import { report } from './report.js';

/**
 * Leoflow/peer ratios and issue 35's goals, from the results the other benchmark files wrote
 * (test/bench/results/*.json). Each of chain40, throughput, peers, durable-peers, startup and
 * slow-dispatch calls this at its end, so whichever runs last in `npm run bench` prints the full
 * tables; a file whose results are missing is named instead, and results from before this run (a
 * file run alone, or one that has not run yet in a full run) are named with their time above the
 * tables.
 */

interface Chain40 {
  at: string;
  summary: Record<'subprocess' | 'agent', { overheadP50: number; overheadP99: number; startToStartP50: number }>;
}
interface Throughput {
  at: string;
  results: {
    agent: string;
    concurrency: number;
    tasksPerSec: number;
    xactPerTask: number;
    done: number;
    tasks: number;
  }[];
  latency: { p50: number; p99: number };
}
interface QueuePeer {
  throughput: { concurrency: number; jobsPerSec: number; xactPerJob: number }[];
  latency: { p50: number; p99: number };
  chain: { stepP50: number };
}
interface Peers {
  at: string;
  graphile: QueuePeer;
  pgBoss: QueuePeer;
  pgbench: { clients: number; tps: number }[];
}
interface DurablePeer {
  chain: { stepP50: number };
  spawnChain: { stepP50: number };
  throughput: { concurrency: number; perSec: number; xactPerWorkflow: number | null }[];
  latency: { p50: number; p99: number };
}
interface DurablePeers {
  at: string;
  dbos: DurablePeer;
  restate: DurablePeer;
}
interface Rows {
  at: string;
  rows: Record<string, string | number>[];
}

async function load<T>(name: string): Promise<T | null> {
  try {
    return JSON.parse(await readFile(path.join(ROOT, 'test/bench/results', `${name}.json`), 'utf8')) as T;
  } catch {
    return null;
  }
}

const x = (a: number, b: number) => `${round(a / b, 2)}x`;
const verdict = (ok: boolean, missBy: string) => (ok ? 'met' : `missed: ${missBy}`);

/** One measure across Leoflow and the four peers ('' where a peer has no such figure). */
function row(
  measure: string,
  leoflow: number,
  peers: Record<'gw' | 'boss' | 'dbos' | 'restate', number | null>,
  digits = 2,
) {
  const v = (n: number | null) => (n === null ? '' : round(n, digits));
  const r = (n: number | null) => (n === null ? '' : x(leoflow, n));
  return {
    measure,
    leoflow: round(leoflow, digits),
    'graphile-worker': v(peers.gw),
    'pg-boss': v(peers.boss),
    DBOS: v(peers.dbos),
    Restate: v(peers.restate),
    'leoflow/graphile': r(peers.gw),
    'leoflow/pg-boss': r(peers.boss),
    'leoflow/DBOS': r(peers.dbos),
    'leoflow/Restate': r(peers.restate),
  };
}

export async function reportRatios(): Promise<void> {
  const [chain, tp, peers, durable, slow, startup] = await Promise.all([
    load<Chain40>('chain40'),
    load<Throughput>('throughput'),
    load<Peers>('peers'),
    load<DurablePeers>('durable-peers'),
    load<Rows>('slow-dispatch'),
    load<Rows>('startup'),
  ]);
  const needed = { chain40: chain, throughput: tp, peers, 'durable-peers': durable, 'slow-dispatch': slow, startup };
  const missing = Object.entries(needed)
    .filter(([, v]) => !v)
    .map(([k]) => k);
  if (missing.length > 0) {
    process.stdout.write(`\n(ratios and goals: waiting for ${missing.join(', ')})\n`);
    return;
  }
  const { graphile: gw, pgBoss: boss } = peers!;
  const { dbos, restate } = durable!;
  const instant = tp!.results.filter((r) => r.agent.startsWith('instant'));
  const at = (c: number) => ({
    gw: gw.throughput.find((t) => t.concurrency === c),
    boss: boss.throughput.find((t) => t.concurrency === c),
    dbos: dbos.throughput.find((t) => t.concurrency === c),
    restate: restate.throughput.find((t) => t.concurrency === c),
  });
  const rows: Record<string, string | number>[] = [];
  for (const l of instant) {
    const p = at(l.concurrency);
    rows.push(
      row(
        `throughput, ${l.concurrency} in flight (tasks, jobs or workflows/s)`,
        l.tasksPerSec,
        {
          gw: p.gw?.jobsPerSec ?? null,
          boss: p.boss?.jobsPerSec ?? null,
          dbos: p.dbos?.perSec ?? null,
          restate: p.restate?.perSec ?? null,
        },
        0,
      ),
    );
    rows.push(
      row(`Postgres transactions a task, job or workflow, ${l.concurrency} in flight`, l.xactPerTask, {
        gw: p.gw?.xactPerJob ?? null,
        boss: p.boss?.xactPerJob ?? null,
        dbos: p.dbos?.xactPerWorkflow ?? null,
        restate: null,
      }),
    );
  }
  const latency = (q: 'p50' | 'p99') => ({
    gw: gw.latency[q],
    boss: boss.latency[q],
    dbos: dbos.latency[q],
    restate: restate.latency[q],
  });
  rows.push(row('enqueue → start p50 ms (peers: add → handler, start → first step)', tp!.latency.p50, latency('p50')));
  rows.push(row('enqueue → start p99 ms', tp!.latency.p99, latency('p99')));
  const a = chain!.summary.agent;
  const sp = chain!.summary.subprocess;
  const step = {
    gw: gw.chain.stepP50,
    boss: boss.chain.stepP50,
    dbos: dbos.chain.stepP50,
    restate: restate.chain.stepP50,
  };
  rows.push(row('chain of 40: step p50 ms (leoflow: agent, finish → next start)', a.overheadP50, step));
  rows.push(row('chain of 40: step p50 ms (leoflow: agent, start → next start)', a.startToStartP50, step));
  rows.push(row('chain of 40: step p50 ms (leoflow: subprocess, finish → next start)', sp.overheadP50, step));
  rows.push(
    row('chain of 40 spawning `true`: step p50 ms (leoflow: subprocess, start → next start)', sp.startToStartP50, {
      gw: null,
      boss: null,
      dbos: dbos.spawnChain.stepP50,
      restate: restate.spawnChain.stepP50,
    }),
  );
  const sources = Object.fromEntries(Object.entries(needed).map(([k, v]) => [k, v!.at]));
  const started = inject('benchRunStartedAt');
  const earlier = Object.fromEntries(Object.entries(sources).filter(([, t]) => t < started));
  if (Object.keys(earlier).length > 0) {
    const list = Object.entries(earlier)
      .map(([k, t]) => `${k} at ${t}`)
      .join(', ');
    process.stdout.write(`\n(ratios and goals below use results of an earlier run: ${list})\n`);
  }
  await report('ratios', rows, { sources, earlier });

  // Issue 35's goals.
  const goals: Record<string, string | number>[] = [];
  for (const l of instant) {
    const g = at(l.concurrency).gw;
    if (g) {
      const ok = l.tasksPerSec >= g.jobsPerSec;
      goals.push({
        goal: `throughput ≥ 1.0x graphile-worker (${l.concurrency} in flight)`,
        today: x(l.tasksPerSec, g.jobsPerSec),
        verdict: verdict(ok, `needs ${x(g.jobsPerSec, l.tasksPerSec)} today's rate`),
      });
    }
    goals.push({
      goal: `≤ 2 Postgres transactions a task (${l.concurrency} in flight)`,
      today: round(l.xactPerTask, 2),
      verdict: verdict(l.xactPerTask <= 2, `${x(l.xactPerTask, 2)} the goal`),
    });
  }
  for (const [name, ms] of [
    ['agent', a.overheadP50],
    ['subprocess', sp.overheadP50],
  ] as const) {
    const best = Math.min(gw.chain.stepP50, dbos.chain.stepP50);
    goals.push({
      goal: `chain-40 step p50 (${name}, finish → next start) ≤ graphile-worker's and DBOS's`,
      today: `${round(ms, 2)} ms (graphile-worker ${round(gw.chain.stepP50, 2)}, DBOS ${round(dbos.chain.stepP50, 2)})`,
      verdict: verdict(ms <= best, `${x(ms, best)} the better of the two`),
    });
  }
  const toStart = tp!.latency.p50;
  goals.push({
    goal: 'enqueue → start p50 ≤ 2x pg-boss',
    today: x(toStart, boss.latency.p50),
    verdict: verdict(toStart <= 2 * boss.latency.p50, `${x(toStart, 2 * boss.latency.p50)} the goal`),
  });
  const warm = startup!.rows.find((r) => String(r.measure).startsWith('server start to ready, warm'));
  const node = startup!.rows.find((r) => String(r.measure).startsWith('node -e 0 (yardstick)'));
  if (warm && node) {
    const ratio = Number(warm.p50_ms) / Number(node.p50_ms);
    goals.push({
      goal: 'warm server start ≤ 8x `node -e 0`',
      today: `${round(ratio, 1)}x`,
      verdict: verdict(ratio <= 8, `${x(ratio, 8)} the goal`),
    });
  }
  const pro = slow!.rows.find((r) => String(r.pool).startsWith('Pro'));
  if (pro) {
    const p99 = Number(pro['tick p99 ms']);
    goals.push({
      goal: 'tick p99 under slow dispatch < 100 ms (Pro pool)',
      today: `${p99} ms`,
      verdict: verdict(p99 < 100, `${x(p99, 100)} the goal`),
    });
  }
  await report('goals', goals, { sources, earlier });
}
