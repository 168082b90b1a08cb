import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { inject } from 'vitest';
import { ROOT } from '../helpers/leoflow-process.js';
import { round } from './pg-xacts.js';
import { report } from './report.js';

/**
 * Leoflow/peer ratios and issue #5's goals, from the results the other benchmark files wrote
 * (test/bench/results/*.json). Each of chain40, throughput, peers and slow-dispatch calls this
 * at its end, so whichever runs last in `npm run bench` prints the full table; a file whose
 * results are missing is named instead, and results from before this run (a file run alone, or
 * one that has not run yet in a full run) are named with their time above the tables.
 */

interface Chain40 {
  at: string;
  summary: Record<'subprocess' | 'agent', { overheadP50: number; overheadP99: number; startToStartP50: number }>;
}
interface Throughput {
  at: string;
  results: { agent: string; concurrency: number; tasksPerSec: number; xactPerTask: number; done: number; tasks: number }[];
  latency: { p50: number; p99: number };
}
interface PeerSide {
  throughput: { concurrency: number; jobsPerSec: number; xactPerJob: number }[];
  latency: { p50: number; p99: number };
  chain: { stepP50: number; stepP99: number; perStep: number };
}
interface Peers {
  at: string;
  graphile: PeerSide;
  pgBoss: PeerSide;
  pgbench: { clients: number; tps: number }[];
}
interface SlowDispatch {
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

export async function reportRatios(): Promise<void> {
  const [chain, tp, peers, slow] = await Promise.all([load<Chain40>('chain40'), load<Throughput>('throughput'), load<Peers>('peers'), load<SlowDispatch>('slow-dispatch')]);
  const missing = Object.entries({ chain40: chain, throughput: tp, peers, 'slow-dispatch': slow }).filter(([, v]) => !v).map(([k]) => k);
  if (missing.length > 0) {
    process.stdout.write(`\n(ratios and goals: waiting for ${missing.join(', ')})\n`);
    return;
  }
  const { graphile, pgBoss, pgbench } = peers!;
  const ceiling1 = pgbench.find((b) => b.clients === 1)!.tps;
  const ceiling8 = pgbench.find((b) => b.clients === 8)!.tps;
  const instant = tp!.results.filter((r) => r.agent.startsWith('instant'));
  const rows: Record<string, string | number>[] = [];
  for (const l of instant) {
    const g = graphile.throughput.find((t) => t.concurrency === l.concurrency);
    const b = pgBoss.throughput.find((t) => t.concurrency === l.concurrency);
    if (!g || !b) continue;
    rows.push({ measure: `throughput, concurrency ${l.concurrency} (tasks|jobs/s)`, leoflow: round(l.tasksPerSec, 0), 'graphile-worker': round(g.jobsPerSec, 0), 'pg-boss': round(b.jobsPerSec, 0), 'leoflow/graphile': x(l.tasksPerSec, g.jobsPerSec), 'leoflow/pg-boss': x(l.tasksPerSec, b.jobsPerSec), 'leoflow of pgbench (1 / 8 clients)': `${round((100 * l.tasksPerSec) / ceiling1, 1)} % / ${round((100 * l.tasksPerSec) / ceiling8, 1)} %` });
    rows.push({ measure: `Postgres transactions per task|job, concurrency ${l.concurrency}`, leoflow: round(l.xactPerTask, 2), 'graphile-worker': round(g.xactPerJob, 2), 'pg-boss': round(b.xactPerJob, 2), 'leoflow/graphile': x(l.xactPerTask, g.xactPerJob), 'leoflow/pg-boss': x(l.xactPerTask, b.xactPerJob), 'leoflow of pgbench (1 / 8 clients)': '' });
  }
  rows.push({ measure: 'enqueue → start p50 ms', leoflow: round(tp!.latency.p50, 2), 'graphile-worker': round(graphile.latency.p50, 2), 'pg-boss': round(pgBoss.latency.p50, 2), 'leoflow/graphile': x(tp!.latency.p50, graphile.latency.p50), 'leoflow/pg-boss': x(tp!.latency.p50, pgBoss.latency.p50), 'leoflow of pgbench (1 / 8 clients)': `${round(tp!.latency.p50 / (1000 / ceiling1), 1)} commit times (1 client)` });
  rows.push({ measure: 'enqueue → start p99 ms', leoflow: round(tp!.latency.p99, 2), 'graphile-worker': round(graphile.latency.p99, 2), 'pg-boss': round(pgBoss.latency.p99, 2), 'leoflow/graphile': x(tp!.latency.p99, graphile.latency.p99), 'leoflow/pg-boss': x(tp!.latency.p99, pgBoss.latency.p99), 'leoflow of pgbench (1 / 8 clients)': '' });
  const a = chain!.summary.agent;
  const sp = chain!.summary.subprocess;
  rows.push({ measure: 'chain of 40: step p50 ms (leoflow: agent, finish → next start)', leoflow: round(a.overheadP50, 2), 'graphile-worker': round(graphile.chain.stepP50, 2), 'pg-boss': round(pgBoss.chain.stepP50, 2), 'leoflow/graphile': x(a.overheadP50, graphile.chain.stepP50), 'leoflow/pg-boss': x(a.overheadP50, pgBoss.chain.stepP50), 'leoflow of pgbench (1 / 8 clients)': `${round(a.overheadP50 / (1000 / ceiling1), 1)} commit times (1 client)` });
  rows.push({ measure: 'chain of 40: step p50 ms (leoflow: agent, start → next start)', leoflow: round(a.startToStartP50, 2), 'graphile-worker': round(graphile.chain.stepP50, 2), 'pg-boss': round(pgBoss.chain.stepP50, 2), 'leoflow/graphile': x(a.startToStartP50, graphile.chain.stepP50), 'leoflow/pg-boss': x(a.startToStartP50, pgBoss.chain.stepP50), 'leoflow of pgbench (1 / 8 clients)': '' });
  rows.push({ measure: 'chain of 40: step p50 ms (leoflow: subprocess, finish → next start)', leoflow: round(sp.overheadP50, 2), 'graphile-worker': round(graphile.chain.stepP50, 2), 'pg-boss': round(pgBoss.chain.stepP50, 2), 'leoflow/graphile': x(sp.overheadP50, graphile.chain.stepP50), 'leoflow/pg-boss': x(sp.overheadP50, pgBoss.chain.stepP50), 'leoflow of pgbench (1 / 8 clients)': '' });
  const sources = { chain40: chain!.at, throughput: tp!.at, peers: peers!.at, slowDispatch: slow!.at };
  const started = inject('benchRunStartedAt');
  const earlier = Object.fromEntries(Object.entries(sources).filter(([, at]) => at < started));
  if (Object.keys(earlier).length > 0) {
    process.stdout.write(`\n(ratios and goals below use results of an earlier run: ${Object.entries(earlier).map(([k, at]) => `${k} at ${at}`).join(', ')})\n`);
  }
  await report('ratios', rows, { sources, earlier });

  // Issue #5's goals.
  const goals: Record<string, string | number>[] = [];
  goals.push({ goal: 'chain-40 overhead p50, connected agent ≤ 2.5 ms', today: `${round(a.overheadP50, 2)} ms`, verdict: verdict(a.overheadP50 <= 2.5, `${x(a.overheadP50, 2.5)} the goal (+${round(a.overheadP50 - 2.5, 1)} ms)`) });
  goals.push({ goal: 'chain-40 overhead p50, subprocess ≤ 5 ms', today: `${round(sp.overheadP50, 2)} ms`, verdict: verdict(sp.overheadP50 <= 5, `${x(sp.overheadP50, 5)} the goal (+${round(sp.overheadP50 - 5, 1)} ms)`) });
  for (const l of instant) {
    const g = graphile.throughput.find((t) => t.concurrency === l.concurrency);
    const b = pgBoss.throughput.find((t) => t.concurrency === l.concurrency);
    if (g) goals.push({ goal: `throughput ≥ 1.0x graphile-worker (concurrency ${l.concurrency})`, today: x(l.tasksPerSec, g.jobsPerSec), verdict: verdict(l.tasksPerSec >= g.jobsPerSec, `needs ${x(g.jobsPerSec, l.tasksPerSec)} today's rate`) });
    if (b) goals.push({ goal: `throughput ≥ 3x pg-boss (concurrency ${l.concurrency})`, today: x(l.tasksPerSec, b.jobsPerSec), verdict: verdict(l.tasksPerSec >= 3 * b.jobsPerSec, `needs ${x(3 * b.jobsPerSec, l.tasksPerSec)} today's rate`) });
    goals.push({ goal: `≤ 2 Postgres transactions per task (concurrency ${l.concurrency})`, today: round(l.xactPerTask, 2), verdict: verdict(l.xactPerTask <= 2, `${x(l.xactPerTask, 2)} the goal`) });
  }
  const pro = slow!.rows.find((r) => String(r.pool).startsWith('Pro'));
  if (pro) {
    const p99 = Number(pro['tick p99 ms']);
    goals.push({ goal: 'tick p99 under slow dispatch < 100 ms (Pro pool)', today: `${p99} ms`, verdict: verdict(p99 < 100, `${x(p99, 100)} the goal`) });
  }
  await report('goals', goals, { sources, earlier });
}
