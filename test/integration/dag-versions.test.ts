import pino from 'pino';
import { beforeEach, describe, expect, it } from 'vitest';
import type { DagSpec } from '../../src/core/dag-spec.js';
import { clearTaskInstance } from '../../src/db/clear-task-instance.js';
import { upsertDag } from '../../src/db/dags.js';
import { removeExpiredRuns } from '../../src/db/history/remove-expired-runs.js';
import { activeRuns, createRun, createRunOfDag } from '../../src/db/runs.js';
import { cleanHistory } from '../../src/server/api/clean-history.js';
import { deleteDagWithHistory } from '../../src/server/api/delete-dag.js';
import { dag, task } from '../helpers/spec-builders.js';
import { databaseForFile } from '../helpers/test-database.js';

/**
 * A run holds no copy of its DAG's spec: it names the version it was made from (dag_versions,
 * written by upsertDag). Applying a DAG never changes a run in flight, retention never takes a
 * version a run left uses, and a DAG's removal takes its versions.
 */

const db = databaseForFile();
beforeEach(async () => {
  await db.sql`delete from dags`;
});

const V1 = dag('etl', [task('a', { retries: 1 })], { maxActiveRuns: 3 });
const V2 = dag('etl', [task('a', { retries: 4 }), task('b', { dependsOn: ['a'] })], { maxActiveRuns: 7 });

async function trigger(runKey: string): Promise<string> {
  const made = await createRunOfDag(db.sql, {
    dagId: 'etl',
    runKey,
    runType: 'manual',
    logicalDate: new Date(),
    conf: {},
    defaultExecutor: 'subprocess',
  });
  return made!.run.id;
}

async function versions(dagId = 'etl'): Promise<{ version: number; spec: DagSpec; max_active_runs: number }[]> {
  return db.sql`select version, spec, max_active_runs from dag_versions where dag_id = ${dagId} order by version`;
}

/** A run ended `days` ago, as the state machine would leave it. */
async function endRun(runId: string, days: number): Promise<void> {
  await db.sql`update task_instances set state = 'success', ended_at = now() - ${`${days} days`}::interval where run_id = ${runId}`;
  await db.sql`update dag_runs set state = 'success', created_at = now() - ${`${days} days`}::interval, started_at = now() - ${`${days} days`}::interval, ended_at = now() - ${`${days} days`}::interval where id = ${runId}`;
}

describe('DAG versions', () => {
  it('stores each version once, in the statement that bumps it, and nothing when the spec is unchanged', async () => {
    expect((await upsertDag(db.sql, V1, 'etl.yaml')).dag.version).toBe(1);
    expect((await upsertDag(db.sql, V1, 'etl.yaml')).outcome).toBe('unchanged');
    expect((await upsertDag(db.sql, V2, 'etl.yaml')).dag.version).toBe(2);
    expect(await versions()).toEqual([
      { version: 1, spec: V1, max_active_runs: 3 },
      { version: 2, spec: V2, max_active_runs: 7 },
    ]);
  });

  it('makes a run from the version it names, and keeps reading that version after the DAG changed', async () => {
    await upsertDag(db.sql, V1, 'etl.yaml');
    const old = await trigger('old');
    await upsertDag(db.sql, V2, 'etl.yaml');
    const made = await db.sql.begin((tx) =>
      createRun(tx, {
        dagId: 'etl',
        dagVersion: 1,
        runKey: 'pinned',
        runType: 'manual',
        logicalDate: new Date(),
        conf: {},
        defaultExecutor: 'subprocess',
      }),
    );
    expect(made.read!.spec).toEqual(V1);
    expect(made.read!.tis.map((t) => [t.task_id, t.max_tries])).toEqual([['a', 2]]);
    const current = await trigger('current');
    const tis = await db.sql<{ run_id: string; task_id: string; max_tries: number }[]>`
      select run_id::text, task_id, max_tries from task_instances where run_id = any(${[old, current]}::bigint[]) order by id`;
    expect(tis).toEqual([
      { run_id: old, task_id: 'a', max_tries: 2 },
      { run_id: current, task_id: 'a', max_tries: 5 },
      { run_id: current, task_id: 'b', max_tries: 1 },
    ]);
    // A version that does not exist is refused, naming it, and makes nothing.
    await expect(
      createRun(db.sql, {
        dagId: 'etl',
        dagVersion: 9,
        runKey: 'nine',
        runType: 'manual',
        logicalDate: new Date(),
        conf: {},
        defaultExecutor: 'subprocess',
      }),
    ).rejects.toThrow('DAG etl has no version 9');
    expect(await db.sql`select 1 from dag_runs where run_key = 'nine'`).toHaveLength(0);

    // The planner's read gives each run its own version's spec, the same object for the runs of
    // one version (sent once).
    const read = await activeRuns(db.sql, 100);
    expect(read.map((r) => [r.run_key, r.spec.tasks.length])).toEqual([
      ['old', 1],
      ['pinned', 1],
      ['current', 2],
    ]);
    expect(read[0]!.spec).toBe(read[1]!.spec);

    // A clear reads the retries of the run's version, not of the DAG's current one.
    await endRun(old, 0);
    const cleared = await clearTaskInstance(db.sql, { runId: old, taskId: 'a', downstream: true });
    expect(cleared.kind).toBe('cleared');
    const [ti] = await db.sql<{ max_tries: number }[]>`select max_tries from task_instances where run_id = ${old}`;
    expect(ti!.max_tries).toBe(2); // try 0 + retries 1 + 1: V1's, not V2's 4
    const missing = await clearTaskInstance(db.sql, { runId: old, taskId: 'b', downstream: false });
    expect(missing.kind).toBe('task_not_found');
  });

  it('keeps every version a remaining run uses when retention and db clean remove runs of it', async () => {
    await upsertDag(db.sql, V1, 'etl.yaml');
    const gone = await trigger('gone');
    const gone2 = await trigger('gone2');
    const left = await trigger('left');
    await upsertDag(db.sql, V2, 'etl.yaml');
    const newer = await trigger('newer');
    await endRun(gone, 30);
    await endRun(gone2, 30);
    await endRun(newer, 30);

    // db clean stops at the first run made after its time (`left`): it removes the two before it.
    expect(
      (await cleanHistory(db.sql, { endedBefore: new Date(Date.now() - 86_400_000), dryRun: false, dagId: 'etl' }))
        .runs,
    ).toBe(2);
    // Retention's own removal takes the only run of version 2.
    expect((await removeExpiredRuns(db.sql, [newer], new Date())).runs).toBe(1);
    expect(await db.sql`select id::text from dag_runs order by id`).toEqual([{ id: left }]);

    // No run is left of version 2, and no run of version 1 but `left`: both versions stay.
    expect((await versions()).map((v) => v.version)).toEqual([1, 2]);
    const [read] = await activeRuns(db.sql, 10, { runIds: [left] });
    expect(read!.spec).toEqual(V1);
  });

  it("removes the versions of a DAG with the DAG, and no other DAG's", async () => {
    await upsertDag(db.sql, V1, 'etl.yaml');
    await upsertDag(db.sql, V2, 'etl.yaml');
    const other = dag('other', [task('x')]);
    await upsertDag(db.sql, other, 'other.yaml');
    await endRun(await trigger('r'), 1);
    const out = await deleteDagWithHistory(
      { sql: db.sql, logger: pino({ level: 'silent' }), stopAttempts: () => {}, attemptsEndWithinMs: 2000 },
      'etl',
      false,
    );
    expect(out.removed.runs).toBe(1);
    expect(await versions()).toEqual([]);
    expect(await versions('other')).toEqual([{ version: 1, spec: other, max_active_runs: other.maxActiveRuns }]);
    // Applied again, the DAG starts over at version 1 (its old versions went with it).
    expect((await upsertDag(db.sql, V2, 'etl.yaml')).dag.version).toBe(1);
    expect((await versions()).map((v) => v.spec)).toEqual([V2]);
  });
});
