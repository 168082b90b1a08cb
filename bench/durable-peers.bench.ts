import { describe, expect, it } from 'vitest';
import { round } from '../test/bench/pg-xacts.js';
import { reportRatios } from '../test/bench/ratios.js';
import { report } from '../test/bench/report.js';
import { dbosTransact } from './dbos-peer.js';
import type { DurablePeerResult } from './durable-peer.js';
import { restate } from './restate-peer.js';

/**
 * The durable-execution peers, DBOS Transact and Restate, measured the same way (bench/durable-peer.ts):
 * chains of 40 steps (no-op, and spawning `true`), 1-step workflows at 10 and 50 in flight, and
 * start → first step. Their steps are functions in the process that runs the workflow; Leoflow's
 * are tasks in another process, fenced by an attempt token, each move recorded as an event.
 */

const N = Number(process.env.LEOFLOW_BENCH_WORKFLOWS ?? 5_000);
const CONCURRENCY = (process.env.LEOFLOW_BENCH_CONCURRENCY ?? '10,50').split(',').map(Number);

function rows(p: DurablePeerResult): Record<string, string | number>[] {
  const out: Record<string, string | number>[] = [];
  const steps = (s: DurablePeerResult['chain']) =>
    `${round(s.stepP50, 2)} / ${round(s.stepP99, 2)} ms (${round(s.perStep, 2)} ms)`;
  out.push({
    peer: p.peer,
    measure: 'chain of 40 no-op steps, step p50 / p99 (per step, total/39)',
    value: steps(p.chain),
    'pg xact/workflow': '',
  });
  out.push({
    peer: p.peer,
    measure: 'chain of 40 steps spawning `true`, step p50 / p99 (per step)',
    value: steps(p.spawnChain),
    'pg xact/workflow': '',
  });
  for (const t of p.throughput) {
    out.push({
      peer: p.peer,
      measure: `1-step workflows, ${t.concurrency} in flight`,
      value: `${round(t.perSec, 0)} workflows/s (${t.done}/${t.workflows} done)`,
      'pg xact/workflow': t.xactPerWorkflow === null ? 'no Postgres' : round(t.xactPerWorkflow, 2),
    });
  }
  out.push({
    peer: p.peer,
    measure: 'start → first step, p50 / p99',
    value: `${round(p.latency.p50, 2)} / ${round(p.latency.p99, 2)} ms`,
    'pg xact/workflow': '',
  });
  return out;
}

describe('durable-execution peers', () => {
  it(`DBOS Transact and Restate (${N} workflows at ${CONCURRENCY.join(' and ')} in flight)`, async () => {
    const dbos = await dbosTransact(N, CONCURRENCY);
    const rs = await restate(N, CONCURRENCY);
    for (const p of [dbos, rs]) for (const t of p.throughput) expect(t.done).toBe(N);
    await report('durable-peers', [...rows(dbos), ...rows(rs)], { workflows: N, dbos, restate: rs });
    await reportRatios();
  });
});
