import { describe, expect, it } from 'vitest';
import { parseDag } from '../../src/core/dag/parse-dag.js';
import { upsertDag } from '../../src/db/dags.js';
import { createTestDatabase } from '../helpers/test-database.js';
import { percentile, report } from './report.js';

/**
 * notify-trigger: what the notification trigger on a run's end costs (migrations 027 and 030), A/B
 * in one database, rounds alternating so drift on a shared machine falls on every variant alike.
 * Each round makes RUNS running runs of a 20-task DAG without notify rules, the server with no
 * defaults (the common case), and ends them in statements of 50, as the planner's finalize does:
 * - trigger off: the floor;
 * - 027: the run's DAG version read for its rules (the run's `notifies` null, as for runs made
 *   before 030, takes that path, the function unchanged from 027);
 * - 030: `notifies` false, the version not read.
 *
 *   npx vitest run --config test/bench/vitest.config.ts test/bench/notify-trigger.bench.ts
 *
 * LEOFLOW_BENCH_NOTIFY_ROUNDS (6), LEOFLOW_BENCH_NOTIFY_RUNS (2000).
 */

const ROUNDS = Number(process.env.LEOFLOW_BENCH_NOTIFY_ROUNDS ?? 6);
const RUNS = Number(process.env.LEOFLOW_BENCH_NOTIFY_RUNS ?? 2000);
const PER_STATEMENT = 50;

type Variant = 'trigger off' | '027 (version read)' | '030 (notifies false)';
const VARIANTS: Variant[] = ['trigger off', '027 (version read)', '030 (notifies false)'];

const TASKS = Array.from({ length: 20 }, (_, i) => `  - { id: t${i}, command: ["sh", "-c", "echo step ${i}"] }`);

describe('notify-trigger', () => {
  it("the notification trigger's cost on a run's end, A/B", async () => {
    const db = await createTestDatabase();
    try {
      await upsertDag(db.sql, parseDag(`dag_id: plain\ntasks:\n${TASKS.join('\n')}\n`, 'plain.yaml'), '');
      const perEnd = new Map<Variant, number[]>(VARIANTS.map((v) => [v, []]));
      let n = 0;
      for (let round = 0; round < ROUNDS; round++) {
        // Rotated each round: no variant always runs first.
        for (const v of VARIANTS.map((_, i) => VARIANTS[(i + round) % VARIANTS.length]!)) {
          await db.sql.unsafe(
            `alter table dag_runs ${v === 'trigger off' ? 'disable' : 'enable'} trigger dag_runs_ended_notify`,
          );
          const notifies = v === '030 (notifies false)' ? false : null;
          const ids = (
            await db.sql<{ id: string }[]>`
              insert into dag_runs (dag_id, run_key, run_type, dag_version, logical_date, state, started_at, notifies)
              select 'plain', 'r' || (${n} + g), 'manual', 1, now(), 'running', now(), ${notifies}
                from generate_series(1, ${RUNS}) g
              returning id::text`
          ).map((r) => r.id);
          n += RUNS;
          await db.sql`vacuum analyze dag_runs`;
          const t0 = performance.now();
          for (let i = 0; i < ids.length; i += PER_STATEMENT) {
            await db.sql`update dag_runs set state = 'success', ended_at = now()
                          where id = any(${ids.slice(i, i + PER_STATEMENT)}::bigint[]) and state = 'running'`;
          }
          perEnd.get(v)!.push(((performance.now() - t0) * 1000) / ids.length);
        }
      }
      const [told] = await db.sql<{ n: number }[]>`select count(*)::int as n from notifications`;
      expect(told!.n).toBe(0);
      const base = percentile(perEnd.get('trigger off')!, 50);
      await report(
        'notify-trigger',
        VARIANTS.map((v) => ({
          variant: v,
          'median µs a run end': percentile(perEnd.get(v)!, 50).toFixed(1),
          'rounds µs': perEnd
            .get(v)!
            .map((x) => x.toFixed(0))
            .join(' '),
          'vs trigger off': (percentile(perEnd.get(v)!, 50) / base).toFixed(2),
          // Paired by round (the same load): the median of this round's over 027's.
          'vs 027, paired': percentile(
            perEnd.get(v)!.map((x, i) => x / perEnd.get('027 (version read)')![i]!),
            50,
          ).toFixed(2),
        })),
        { rounds: ROUNDS, runs: RUNS, perStatement: PER_STATEMENT },
      );
    } finally {
      await db.drop();
    }
  }, 600_000);
});
