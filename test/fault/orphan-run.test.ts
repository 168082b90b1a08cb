import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { upsertDag } from '../../src/db/dags.js';
import { createRun } from '../../src/db/runs.js';
import { startServer, waitFor, type ServerProcess } from '../helpers/leoflow-process.js';
import { metricSeries } from '../helpers/scrape-metrics.js';
import { createTestDatabase, type TestDatabase } from '../helpers/test-database.js';
import { dag, task } from '../helpers/spec-builders.js';

/**
 * Fault: the control plane crashed between the last TI of a run finishing and the run being
 * finalized. The database is put in exactly the state that crash leaves — the run `running`,
 * every TI terminal, the last one ended a few seconds ago — and the real server is started on it
 * with a 1 s run-orphan threshold. A plain run is finalized by the planner on its first step; a
 * poisoned one (which the planner skips) only the run reaper can end. A poisoned run that still
 * has a TI in flight is left alone: the reaper acts only on a positive signal.
 */

let db: TestDatabase;
let server: ServerProcess | undefined;

beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  await server?.kill();
  await db?.drop();
});

const spec = dag('crashed', [task('a'), task('b', { dependsOn: ['a'] })]);

/**
 * A run as a crash leaves it: started 10 s ago, each TI in the given state (terminal ones ended
 * `endedAgoS` seconds ago after one try), the run itself still `running`.
 */
async function crashedRun(
  key: string,
  states: Record<string, string>,
  opts: { poison?: string; endedAgoS?: number } = {},
): Promise<string> {
  const { dag } = await upsertDag(db.sql, spec, 'crashed.yaml');
  const { run } = await db.sql.begin((tx) =>
    createRun(tx, {
      dagId: spec.dagId,
      dagVersion: dag.version,
      runKey: key,
      runType: 'manual',
      logicalDate: new Date(),
      conf: {},
      defaultExecutor: 'subprocess',
    }),
  );
  await db.sql`update dag_runs set state = 'running', started_at = now() - interval '10 seconds', poison_error = ${opts.poison ?? null} where id = ${run.id}`;
  const ago = `${opts.endedAgoS ?? 3} seconds`;
  for (const [taskId, state] of Object.entries(states)) {
    const ended = ['success', 'failed'].includes(state);
    await db.sql`
      update task_instances set state = ${state}, try_number = 1, attempt_token = gen_random_uuid(), pending_reason = null,
        dispatch_key = ${`crashed-${run.id}-${taskId}-1`}, queued_at = now() - interval '9 seconds',
        started_at = now() - interval '8 seconds', heartbeat_at = case when ${ended} then now() - ${ago}::interval else now() end,
        ended_at = case when ${ended} then now() - ${ago}::interval end,
        exit_code = case ${state} when 'success' then 0 when 'failed' then 1 end,
        error = case when ${state} = 'failed' then 'exit code 1' end
      where run_id = ${run.id} and task_id = ${taskId}`;
  }
  if (opts.poison) {
    await db.sql`insert into events (run_id, kind, payload) values (${run.id}, 'run.poisoned', ${db.sql.json({ error: opts.poison } as never)})`;
  }
  return run.id;
}

async function runRow(id: string) {
  const [row] = await db.sql<
    { state: string; poison_error: string | null; ended_at: Date | null; settled_at: Date | null }[]
  >`
    select state, poison_error, ended_at, settled_at from dag_runs where id = ${id}`;
  return row!;
}

async function terminalEvents(id: string) {
  return db.sql<{ payload: { to: string; reason?: string } }[]>`
    select payload from events where run_id = ${id} and kind = 'run.state' and payload->>'to' in ('success', 'failed', 'cancelled') order by seq`;
}

describe('orphaned run', () => {
  it('a crash between the last TI ending and the finalize: the planner or the run reaper finalizes the run', async () => {
    const plain = await crashedRun('plain', { a: 'success', b: 'success' });
    const poisoned = await crashedRun('poisoned', { a: 'success', b: 'failed' }, { poison: 'DAG spec has a cycle' });
    const inFlight = await crashedRun('in_flight', { a: 'success', b: 'running' }, { poison: 'DAG spec has a cycle' });

    server = await startServer({
      env: { DATABASE_URL: db.url },
      // The heartbeat threshold stays at its default (90 s): the in-flight TI must not be reaped
      // by the heartbeat reaper within this test, only the run reaper's restraint is on trial.
      args: ['--run-orphan-threshold', '1s', '--tick-interval', '200ms', '--heartbeat-interval', '200ms'],
    });

    await waitFor(
      'both settled runs finalized',
      async () => {
        const [p, q] = await Promise.all([runRow(plain), runRow(poisoned)]);
        return p.state !== 'running' && q.state !== 'running';
      },
      10_000,
    );

    // The plain run: its TIs all succeeded, and the planner finalized it (no reaper reason).
    expect(await runRow(plain)).toMatchObject({ state: 'success', poison_error: null });
    expect((await terminalEvents(plain)).map((e) => e.payload)).toEqual([{ to: 'success' }]);

    // The poisoned run: the planner skips it, so the run reaper ended it — failed, by its TIs.
    const p = await runRow(poisoned);
    expect(p).toMatchObject({ state: 'failed', poison_error: 'DAG spec has a cycle' });
    expect(p.ended_at).toBeInstanceOf(Date);
    expect(p.settled_at).toBeInstanceOf(Date);
    expect((await terminalEvents(poisoned)).map((e) => e.payload)).toEqual([{ to: 'failed', reason: 'orphan_reaped' }]);

    await waitFor(
      'leoflow_orphan_reaped_total{kind="run"} on /metrics',
      async () => (await metricSeries(server!.metricsUrl, 'leoflow_orphan_reaped_total{kind="run"}')) !== null,
      5000,
    );
    expect(await metricSeries(server.metricsUrl, 'leoflow_orphan_reaped_total{kind="run"}')).toBe(1);

    // Do no harm: the poisoned run with a TI still running is not reaped, however long it waits
    // (here 2.5 s more, a dozen steps past the 1 s threshold).
    await new Promise((r) => setTimeout(r, 2500));
    expect(await runRow(inFlight)).toMatchObject({ state: 'running' });
    const tis = await db.sql<
      { task_id: string; state: string }[]
    >`select task_id, state from task_instances where run_id = ${inFlight} order by task_id`;
    expect(tis).toEqual([
      { task_id: 'a', state: 'success' },
      { task_id: 'b', state: 'running' },
    ]);
    expect(await terminalEvents(inFlight)).toEqual([]);
    expect(await metricSeries(server.metricsUrl, 'leoflow_orphan_reaped_total{kind="run"}')).toBe(1);
    expect(await metricSeries(server.metricsUrl, 'leoflow_orphan_reap_errors_total{kind="run"}')).toBeNull();

    expect((await server.stop()).code).toBe(0);
  });
});
