import os from 'node:os';
import { describe, expect, it } from 'vitest';
import { upsertDag } from '../../src/db/dags.js';
import type { Sql } from '../../src/db/sql.js';
import { step } from '../../src/scheduler/step.js';
import { schedulerHarness } from '../helpers/scheduler-harness.js';
import { dag, task } from '../helpers/spec-builders.js';
import { createTestDatabase } from '../helpers/test-database.js';
import { report } from './report.js';

/**
 * waits: a full scheduler step's cost with no waiting task, with 1,000 and with 10,000, each in a
 * running run of its own (a wait on an event an hour away), the step's sweeps bounded as the
 * leader runs them. What must not grow is the step: a wait is read again only when its run is
 * swept, as any running run is, and the deadline phase reads only the waits that are due.
 * Rounds alternate the databases, so the machine's drift falls on all alike; medians are given.
 */

const STEPS = Number(process.env.LEOFLOW_BENCH_WAITS_STEPS ?? 40);
const ROUNDS = 5;

async function withWaits(sql: Sql, n: number): Promise<void> {
  const spec = dag('waits', [
    task('w', { command: [], wait: { event: 'far.away', timeoutMs: 3_600_000, onTimeout: 'failed' } }),
  ]);
  const { dag: row } = await upsertDag(sql, spec, 'waits.yaml');
  if (n === 0) return;
  await sql`
    with runs as (
      insert into dag_runs (dag_id, run_key, run_type, dag_version, logical_date, conf, state, started_at)
      select 'waits', 'bench__' || g, 'manual', ${row.version}, now(), '{}', 'running', now()
      from generate_series(1, ${n}) g
      returning id),
    made as (
      insert into task_instances (run_id, task_id, max_tries, state, executor, pending_reason)
      select id, 'w', 1, 'waiting', 'subprocess', 'WAITING_FOR_EVENT:far.away' from runs
      returning id, run_id, task_id)
    insert into task_waits (ti_id, run_id, task_id, kind, event, deadline, on_timeout)
    select id, run_id, task_id, 'event', 'far.away', now() + interval '1 hour', 'failed' from made`;
  await sql`analyze`;
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

describe('waits', () => {
  it('measures a full step with 0, 1,000 and 10,000 waiting tasks', async () => {
    const loadBefore = os.loadavg();
    const sizes = [0, 1_000, 10_000];
    const dbs = await Promise.all(sizes.map(() => createTestDatabase()));
    try {
      for (const [i, n] of sizes.entries()) await withWaits(dbs[i]!.sql, n);
      const harnesses = dbs.map((d) =>
        schedulerHarness(d.sql, { sweep: { cursor: '0', orphansAfter: '0' }, sweepRunsPerStep: 100 }),
      );
      const ms: number[][] = sizes.map(() => []);
      for (const h of harnesses) for (let s = 0; s < 5; s++) await step(h.ctx); // warm-up
      for (let r = 0; r < ROUNDS; r++) {
        for (const [i, h] of harnesses.entries()) {
          for (let s = 0; s < STEPS; s++) {
            const t = performance.now();
            const res = await step(h.ctx);
            ms[i]!.push(performance.now() - t);
            expect(res.failedPhases).toEqual([]);
          }
        }
      }
      const rows = sizes.map((n, i) => ({
        waiting_tasks: n,
        step_ms_median: Number(median(ms[i]!).toFixed(2)),
        step_ms_p90: Number([...ms[i]!].sort((a, b) => a - b)[Math.floor(ms[i]!.length * 0.9)]!.toFixed(2)),
      }));
      await report('waits', rows, { loadavgBefore: loadBefore, loadavgAfter: os.loadavg(), steps: STEPS * ROUNDS });
      const [stillWaiting] = await dbs[2]!.sql<{ n: number }[]>`
        select count(*)::int as n from task_instances where state = 'waiting'`;
      expect(stillWaiting!.n).toBe(10_000);
    } finally {
      await Promise.all(dbs.map((d) => d.drop()));
    }
  });
});
