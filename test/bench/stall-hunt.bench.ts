import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { describe, it } from 'vitest';
import { createClients } from '../../src/cli/client.js';
import { startAgent, startServer, type AgentProcess, type ServerProcess } from '../helpers/leoflow-process.js';
import { createTestDatabase, type TestDatabase } from '../helpers/test-database.js';
import { agentConnected } from './agent-connected.js';
import { startInstantAgent, type InstantAgent } from './instant-agent.js';
import { sleep } from './pg-xacts.js';
import { applyThroughputDag, queueThroughputRuns } from './throughput-workload.js';

/**
 * Hunts the stall seen twice in full `npm run bench` runs (BENCHMARKS.md, throughput): the
 * throughput bench's configurations, repeated, failing as soon as no task ends for
 * LEOFLOW_STALL_AFTER_MS (10 s), after writing what the server, the agent and Postgres were doing
 * into LEOFLOW_STALL_DIR (/tmp/leoflow-stall). Not part of `npm run bench` (skipped unless
 * LEOFLOW_BENCH_STALL_HUNT=1):
 *
 *   LEOFLOW_BENCH_STALL_HUNT=1 npx vitest run --config test/bench/vitest.config.ts test/bench/stall-hunt.bench.ts
 *
 * LEOFLOW_STALL_REPS (3) rounds of LEOFLOW_STALL_CONFIGS (instant:10,process:10,instant:50,process:50),
 * LEOFLOW_STALL_TASKS (10,000) tasks each.
 */

const N = Number(process.env.LEOFLOW_STALL_TASKS ?? 10_000);
const REPS = Number(process.env.LEOFLOW_STALL_REPS ?? 3);
const AFTER_MS = Number(process.env.LEOFLOW_STALL_AFTER_MS ?? 10_000);
const DIR = process.env.LEOFLOW_STALL_DIR ?? path.join(os.tmpdir(), 'leoflow-stall');
const CONFIGS = (process.env.LEOFLOW_STALL_CONFIGS ?? 'instant:10,process:10,instant:50,process:50')
  .split(',')
  .map((c) => {
    const [kind, slots] = c.split(':');
    return { kind: kind as 'instant' | 'process', slots: Number(slots) };
  });

async function dump(db: TestDatabase, s: ServerProcess, agentOutput: string, what: string): Promise<void> {
  await mkdir(DIR, { recursive: true });
  const metrics = await fetch(s.metricsUrl).then(
    (r) => r.text(),
    (err: unknown) => `metrics unreachable: ${String(err)}`,
  );
  const activity = await db.sql`
    select pid, application_name, state, wait_event_type, wait_event, now() - xact_start as xact_age, now() - query_start as query_age, left(query, 300) as query
    from pg_stat_activity where datname = current_database() and pid <> pg_backend_pid()`;
  const locks =
    await db.sql`select pid, locktype, relation::regclass::text as relation, mode, granted from pg_locks where not granted`;
  const states =
    await db.sql`select 'run' as kind, state, count(*)::int as n from dag_runs group by state union all select 'ti', state, count(*)::int from task_instances group by state`;
  await writeFile(path.join(DIR, 'what.txt'), what + '\n');
  await writeFile(path.join(DIR, 'metrics.txt'), metrics);
  await writeFile(path.join(DIR, 'pg.json'), JSON.stringify({ activity, locks, states }, null, 1));
  await writeFile(path.join(DIR, 'server.log'), s.logs.map((l) => JSON.stringify(l)).join('\n'));
  await writeFile(path.join(DIR, 'agent.log'), agentOutput);
}

describe.skipIf(!process.env.LEOFLOW_BENCH_STALL_HUNT)('stall hunt', () => {
  it('runs the throughput configurations again and again without a stall', async () => {
    for (let rep = 0; rep < REPS; rep++) {
      for (const { kind, slots } of CONFIGS) {
        const tmp = await mkdtemp(path.join(os.tmpdir(), 'leoflow-stall-'));
        const db = await createTestDatabase();
        let s: ServerProcess | null = null;
        let proc: AgentProcess | null = null;
        let instant: InstantAgent | null = null;
        try {
          s = await startServer({
            env: { DATABASE_URL: db.url },
            args: ['--heartbeat-interval', '1s', '--dispatch-workers', '16', '--dispatch-queue', '256'],
            quiet: true,
          });
          await applyThroughputDag(s.url, tmp, { paused: true });
          const api = createClients(s.url);
          await queueThroughputRuns(db.sql, N, 's');
          if (kind === 'instant') instant = startInstantAgent(s.url, { agentId: `hunt-${slots}`, slots });
          else proc = startAgent(s.url, ['--id', `hunt-${slots}`, '--slots', String(slots), '--log-level', 'warn']);
          await agentConnected(api);
          await api.workflow.pauseDag({ dagId: 'tp', paused: false });
          let done = -1;
          let movedAt = Date.now();
          for (;;) {
            const [r] = await db.sql<
              { n: number }[]
            >`select count(*)::int as n from task_instances where state = 'success'`;
            if (r!.n >= N) break;
            if (r!.n !== done) {
              done = r!.n;
              movedAt = Date.now();
            } else if (Date.now() - movedAt > AFTER_MS) {
              const what = `round ${rep}, ${kind} agent, ${slots} slots: no task ended for ${AFTER_MS} ms at ${done}/${N}`;
              await dump(db, s, proc?.output() ?? '', what);
              throw new Error(`${what}; see ${DIR}`);
            }
            await sleep(200);
          }
        } finally {
          await instant?.close();
          await proc?.stop();
          await s?.stop();
          await db.drop();
          await rm(tmp, { recursive: true, force: true });
        }
      }
    }
  }, 3_600_000);
});
