import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AttemptResult } from '../../src/core/attempt.js';
import type { DagSpec, TaskDefinition } from '../../src/core/dag-spec.js';
import { claimAttempt } from '../../src/db/attempts/claim-attempt.js';
import { finishAttempt } from '../../src/db/attempts/finish-attempt.js';
import { startAttempt } from '../../src/db/attempts/start-attempt.js';
import { upsertDag } from '../../src/db/dags.js';
import { createRun } from '../../src/db/runs.js';
import { createSql, type Sql } from '../../src/db/sql.js';
import { createDispatchPool, type DispatchPool } from '../../src/dispatch/pool.js';
import type { WorkItem } from '../../src/core/work-item.js';
import type { SchedulerContext } from '../../src/scheduler/context.js';
import { schedulerHarness, type PhaseError } from '../helpers/scheduler-harness.js';
import { step } from '../../src/scheduler/step.js';
import { createTestDatabase, type TestDatabase } from '../helpers/test-database.js';
import { dag, task } from '../helpers/spec-builders.js';
import { EDITIONS, editionPool } from '../helpers/editions.js';

/**
 * Fault: two leaders step at the same time (a brief overlap, forced here). Two complete scheduler
 * stacks — their own postgres.js pool, dispatch pool and context — share one database and step
 * concurrently, over and over, while their dispatch pools claim, start and finish attempts (a
 * fake executor at the process boundary). Guarded writes must leave no mixed or duplicated state:
 * every attempt exactly once, every run finalized exactly once, every cron run created once.
 */

const logger = pino({ level: 'silent' });
const OK: AttemptResult = { exitCode: 0, signal: null, error: null, outcome: 'success' };
const FAIL: AttemptResult = { exitCode: 1, signal: null, error: 'exit code 1', outcome: 'failed' };
const MINUTE = 60_000;

/** start → 17 parallel tasks + flaky (fails its first try) → join: 20 tasks. */
const MIDDLE = [...Array.from({ length: 17 }, (_, i) => `m${String(i).padStart(2, '0')}`), 'flaky'];
const fanSpec = dag('overlap_fan', [
  task('start'),
  ...MIDDLE.map((id) => task(id, { dependsOn: ['start'], retries: id === 'flaky' ? 1 : 0 })),
  task('join', { dependsOn: MIDDLE }),
]);
const MANUAL_RUNS = 5;

interface Stack {
  name: string;
  sql: Sql;
  pool: DispatchPool<WorkItem>;
  ctx: SchedulerContext;
  errors: PhaseError[];
  /** Every attempt this stack's executor claimed (and so ran). */
  claimed: { tiId: string; taskId: string; tryNumber: number; dispatchKey: string }[];
  /** Claims refused because the other leader's dispatcher got there first. */
  refused: number;
}

let db: TestDatabase;
const stacks: Stack[] = [];

/** One simulated clock for both leaders (leader b runs a little ahead, as real clocks do). */
const clock = { now: 0 };

function createStack(name: string, skewMs: number, pool: { workers: number; capacity: number }): Stack {
  const sql = createSql(db.url, { max: 4, applicationName: `leoflow-overlap-${name}` });
  const h = schedulerHarness(sql, {
    offer: (item) => s.pool.offer(item),
    now: () => new Date(clock.now + skewMs),
    maxRunsPerStep: 1000,
  });
  const s: Stack = { name, sql, errors: h.errors, claimed: [], refused: 0, pool: undefined as never, ctx: h.ctx };
  s.pool = createDispatchPool<WorkItem>({
    workers: pool.workers,
    capacity: pool.capacity,
    key: (item) => item.tiId,
    logger,
    // The fake executor: claim → start → finish, as the subprocess executor would report.
    dispatch: async (item) => {
      // A little jitter, so both leaders' dispatchers race for the same TIs.
      await new Promise((r) => setTimeout(r, Math.random() * 3));
      const claim = await claimAttempt(sql, item.tiId, item.executor);
      if (!claim) {
        s.refused++;
        return;
      }
      s.claimed.push({
        tiId: item.tiId,
        taskId: item.taskId,
        tryNumber: claim.tryNumber,
        dispatchKey: claim.dispatchKey,
      });
      const a = { tiId: item.tiId, tryNumber: claim.tryNumber, attemptToken: claim.attemptToken };
      expect(await startAttempt(sql, a, { pid: null, agentId: name })).toBe(true);
      const result = item.taskId === 'flaky' && claim.tryNumber === 1 ? FAIL : OK;
      expect(await finishAttempt(sql, a, result)).toBe(result === OK ? 'success' : 'up_for_retry');
    },
    onError: (item, err) => s.errors.push({ phase: 'dispatch', err, ids: { tiId: item.tiId } }),
  });
  stacks.push(s);
  return s;
}

// Against each edition's dispatch pool: Lite's single drainer with a queue of one (offers refused
// and retried at the next step), Pro's 16 drainers racing the other leader's 16.
describe.each(EDITIONS)('leader overlap ($edition pool)', ({ edition }) => {
  const pool = editionPool(edition);
  beforeAll(async () => {
    db = await createTestDatabase();
  });
  afterAll(async () => {
    for (const s of stacks.splice(0)) {
      await s.pool.close();
      await s.sql.end({ timeout: 5 });
    }
    await db?.drop();
  });

  it(`two leaders stepping at once leave no mixed or duplicated state (${pool.workers} drainers, queue ${pool.capacity} each)`, async () => {
    // The simulated clock starts at a whole minute a little in the future (so retry backoffs,
    // computed from the database's now(), elapse on the next step) and moves 15 s per iteration.
    const t0 = Math.ceil((Date.now() + 5000) / MINUTE) * MINUTE;
    clock.now = t0;
    const cronStart = new Date(t0 - 3 * MINUTE);
    const cronSpec = dag(
      'overlap_cron',
      [task('c1'), task('c2', { dependsOn: ['c1'] }), task('c3', { dependsOn: ['c1'] })],
      {
        schedule: '* * * * *',
        catchup: true,
        startDate: cronStart.toISOString(),
      },
    );
    await upsertDag(db.sql, cronSpec, 'cron.yaml', new Date(t0));
    const { dag: fanRow } = await upsertDag(db.sql, fanSpec, 'fan.yaml');
    for (let i = 0; i < MANUAL_RUNS; i++) {
      await db.sql.begin((tx) =>
        createRun(tx, {
          dagId: fanSpec.dagId,
          dagVersion: fanRow.version,
          runKey: `manual__${i}`,
          runType: 'manual',
          logicalDate: new Date(t0),
          conf: {},
          defaultExecutor: 'subprocess',
        }),
      );
    }

    const a = createStack('a', 0, pool);
    const b = createStack('b', 1500, pool);
    // The clock stops after 9 iterations, at t0 + 2 min: fire times t0 - 3 min … t0 + 2 min (b's
    // skew adds none: it is less than a minute).
    const CLOCK_STEPS = 9;
    // Stepping goes on after everything ended, so stale reads of ended runs get their chance too.
    const MIN_ITERATIONS = 30;
    const expectedCronKeys = Array.from(
      { length: 6 },
      (_, i) => `scheduled__${new Date(cronStart.getTime() + i * MINUTE).toISOString()}`,
    );

    let iterations = 0;
    const deadline = Date.now() + 25_000;
    for (;;) {
      iterations++;
      if (iterations <= CLOCK_STEPS) clock.now = t0 + (iterations - 1) * 15_000;
      await Promise.all([step(a.ctx), step(b.ctx)]);
      if (iterations >= MIN_ITERATIONS) {
        const [open] = await db.sql<
          { n: number }[]
        >`select count(*)::int as n from dag_runs where state in ('queued', 'running')`;
        if (open!.n === 0 && a.pool.inFlight + b.pool.inFlight === 0) break;
      }
      if (Date.now() > deadline) throw new Error(`runs still open after ${iterations} iterations`);
    }
    expect([...a.errors, ...b.errors]).toEqual([]);

    // Every run ended success; the scheduled runs are exactly the fire times, each once.
    const runs = await db.sql<{ id: string; dag_id: string; run_key: string; state: string }[]>`
      select id, dag_id, run_key, state from dag_runs order by id`;
    expect(runs.filter((r) => r.dag_id === 'overlap_fan')).toHaveLength(MANUAL_RUNS);
    const cronKeys = runs
      .filter((r) => r.dag_id === 'overlap_cron')
      .map((r) => r.run_key)
      .sort();
    expect(cronKeys).toEqual(expectedCronKeys);
    expect(new Set(runs.map((r) => `${r.dag_id}/${r.run_key}`)).size).toBe(runs.length);
    expect(runs.filter((r) => r.state !== 'success')).toEqual([]);

    // One created event and exactly one terminal state event per run: none finalized twice.
    const runEvents = await db.sql<{ run_id: string; to: string; n: number }[]>`
      select run_id, payload->>'to' as to, count(*)::int as n from events where kind = 'run.state' group by 1, 2 order by 1, 2`;
    for (const r of runs) {
      expect(
        runEvents.filter((e) => e.run_id === r.id),
        `run ${r.id} events`,
      ).toEqual([
        { run_id: r.id, to: 'queued', n: 1 },
        { run_id: r.id, to: 'running', n: 1 },
        { run_id: r.id, to: 'success', n: 1 },
      ]);
    }

    // Every TI ran exactly as often as it should: once, twice for flaky of the manual runs.
    const tis = await db.sql<
      { id: string; run_id: string; task_id: string; state: string; try_number: number; dag_id: string }[]
    >`
      select ti.id, ti.run_id, ti.task_id, ti.state, ti.try_number, r.dag_id
      from task_instances ti join dag_runs r on r.id = ti.run_id order by ti.id`;
    expect(tis).toHaveLength(MANUAL_RUNS * 20 + expectedCronKeys.length * 3);
    for (const ti of tis) {
      expect(ti, `TI ${ti.task_id} of run ${ti.run_id}`).toMatchObject({
        state: 'success',
        try_number: ti.task_id === 'flaky' ? 2 : 1,
      });
    }

    // From the audit log: per TI exactly try_number queued moves and try_number running moves.
    const moves = await db.sql<{ ti_id: string; to: string; n: number; tries: number[] }[]>`
      select ti_id, payload->>'to' as to, count(*)::int as n, array_agg((payload->>'try')::int order by seq) as tries
      from events where kind = 'ti.state' and payload->>'to' in ('queued', 'running') group by 1, 2`;
    const byTi = new Map<string, Record<string, number[]>>();
    for (const m of moves) (byTi.get(m.ti_id) ?? byTi.set(m.ti_id, {}).get(m.ti_id)!)[m.to] = m.tries;
    for (const ti of tis) {
      const expected = ti.try_number === 2 ? [1, 2] : [1];
      expect(byTi.get(ti.id), `TI ${ti.task_id} of run ${ti.run_id}`).toEqual({ queued: expected, running: expected });
    }

    // Each attempt was claimed by exactly one dispatcher, under its own dispatch key.
    const claimed = [...a.claimed, ...b.claimed];
    const attempts = tis.reduce((n, ti) => n + ti.try_number, 0);
    expect(claimed).toHaveLength(attempts);
    const keys = claimed.map((c) => c.dispatchKey);
    expect(new Set(keys).size).toBe(keys.length);
    for (const c of claimed) expect(c.dispatchKey).toMatch(new RegExp(`-${c.taskId}-${c.tryNumber}$`));

    // The overlap was real: both leaders did work, and the guard turned duplicates away.
    expect(a.claimed.length).toBeGreaterThan(0);
    expect(b.claimed.length).toBeGreaterThan(0);
    expect(a.refused + b.refused).toBeGreaterThan(0);
  });
});
