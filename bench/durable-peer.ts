import { spawn } from 'node:child_process';

/**
 * What `npm run bench` measures of a durable-execution peer (DBOS Transact, Restate), the same
 * four things for each, beside Leoflow's chain-40, throughput and enqueue → start:
 * - a chain of 40 steps in one workflow, each a no-op: step i entered → step i+1 entered;
 * - the same chain with each step spawning `true` and waiting for it to exit;
 * - 1-step workflows with 10 and 50 in flight (that many callers, each starting the next workflow
 *   as its last one ends): workflows a second from the first start to the last end;
 * - start → first step: the workflow's start called → its step entered, one workflow at a time.
 * A peer's steps are functions in the process that started the workflow; Leoflow's are tasks in
 * another process, fenced, with their events. This module holds no peer's code, so the Restate
 * driver (run in a network namespace of its own, see restate-peer.ts) can use it as well.
 */

export const CHAIN = 40;
export const CHAIN_REPS = 3;
export const LATENCY_SAMPLES = 200;
export const WARMUP = 10;

export interface StepStats {
  stepP50: number;
  stepP99: number;
  /** First step entered → last step entered, over the number of steps between them. */
  perStep: number;
}

export interface InFlightResult {
  concurrency: number;
  workflows: number;
  done: number;
  perSec: number;
  /** Postgres transactions a workflow, where the peer keeps its state in Postgres. */
  xactPerWorkflow: number | null;
  windowMs: number;
}

export interface DurablePeerResult {
  peer: string;
  config: string;
  chain: StepStats;
  spawnChain: StepStats;
  throughput: InFlightResult[];
  /** Start called → first step entered. */
  latency: { p50: number; p99: number; samples: number };
}

/** Nearest-rank percentile (the same rule as test/bench/report.ts). */
export function percentile(values: number[], p: number): number {
  if (values.length === 0) return NaN;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]!;
}

function median(values: number[]): number {
  const s = [...values].sort((a, b) => a - b);
  return s[Math.floor((s.length - 1) / 2)]!;
}

/** Step statistics of one chain, from the times its steps were entered. */
export function stepStats(starts: number[]): StepStats {
  if (starts.length !== CHAIN) throw new Error(`a chain entered ${starts.length} of its ${CHAIN} steps`);
  const steps = starts.slice(1).map((s, i) => s - starts[i]!);
  return {
    stepP50: percentile(steps, 50),
    stepP99: percentile(steps, 99),
    perStep: (starts[CHAIN - 1]! - starts[0]!) / (CHAIN - 1),
  };
}

/** Runs `once` CHAIN_REPS + 1 times and keeps the median of all but the first (a warm-up). */
export async function medianChain(once: () => Promise<StepStats>): Promise<StepStats> {
  const reps: StepStats[] = [];
  for (let i = 0; i < CHAIN_REPS + 1; i++) reps.push(await once());
  const kept = reps.slice(1);
  return {
    stepP50: median(kept.map((r) => r.stepP50)),
    stepP99: median(kept.map((r) => r.stepP99)),
    perStep: median(kept.map((r) => r.perStep)),
  };
}

/** `spawn('true')` until it exits: what a Leoflow task of `true` runs, done in a peer's step. */
export function spawnTrue(): Promise<void> {
  return new Promise((resolve, reject) => {
    spawn('true', { stdio: 'ignore' })
      .on('error', reject)
      .on('exit', (code) => (code === 0 ? resolve() : reject(new Error(`true exited ${code}`))));
  });
}

/** `total` calls of `one`, `concurrency` at a time; the window runs from the first call to the last end. */
export async function inFlight(
  total: number,
  concurrency: number,
  one: () => Promise<unknown>,
): Promise<{ done: number; windowMs: number }> {
  let next = 0;
  let done = 0;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < total) {
        next++;
        await one();
        done++;
      }
    }),
  );
  return { done, windowMs: performance.now() - t0 };
}

/** Start called → first step entered, one workflow at a time; `start` resolves when it has ended. */
export async function startLatency(
  start: (onStep: () => void) => Promise<unknown>,
): Promise<DurablePeerResult['latency']> {
  const out: number[] = [];
  for (let i = 0; i < WARMUP + LATENCY_SAMPLES; i++) {
    let entered = 0;
    const t0 = performance.now();
    await start(() => (entered = performance.now()));
    if (entered === 0) throw new Error('a workflow ended without entering its step');
    if (i >= WARMUP) out.push(entered - t0);
    await new Promise((r) => setTimeout(r, 5));
  }
  return { p50: percentile(out, 50), p99: percentile(out, 99), samples: out.length };
}
