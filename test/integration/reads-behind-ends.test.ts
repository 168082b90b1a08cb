import { describe, expect, it } from 'vitest';
import { claimAttempts } from '../../src/db/attempts/claim-attempt.js';
import { createReportBatcher } from '../../src/db/attempts/report-batcher.js';
import { upsertDag } from '../../src/db/dags.js';
import { activeRuns, createRun, createRunOfDag } from '../../src/db/runs.js';
import { listTis } from '../../src/db/tis.js';
import { PlannerMemory } from '../../src/scheduler/planner-memory.js';
import { dag, task } from '../helpers/spec-builders.js';
import { quietLogWriter } from '../helpers/quiet-log-writer.js';
import { databaseForFile } from '../helpers/test-database.js';
import { watching } from '../helpers/watching-sql.js';

/**
 * The leader reads the runs of the attempts that ended in the same round trip as the ends' write
 * (pipelined behind it on one connection), so the step that follows reads nothing first. The read
 * must see the ends it follows, and a read overtaken by other news about its run must not be used.
 */

const db = databaseForFile();

let seq = 0;
/** A running run of a two-task chain whose first task is claimed and running. */
async function runningChain() {
  const spec = dag(`pf${++seq}`, [task('a'), task('b', { dependsOn: ['a'] })]);
  const { dag: row } = await upsertDag(db.sql, spec, `${spec.dagId}.yaml`);
  const { run } = await db.sql.begin((tx) =>
    createRun(tx, {
      dagId: spec.dagId,
      dagVersion: row.version,
      runKey: 'r',
      runType: 'manual',
      logicalDate: new Date(),
      conf: {},
      defaultExecutor: 'subprocess',
    }),
  );
  const a = (await listTis(db.sql, run.id)).find((t) => t.task_id === 'a')!;
  await db.sql`update dag_runs set state = 'running' where id = ${run.id}`;
  await db.sql`update task_instances set state = 'scheduled' where id = ${a.id}`;
  const claim = (await claimAttempts(db.sql, 'agents', [{ tiId: a.id, agentId: 'agent-1' }])).get(a.id)!;
  const attempt = { tiId: a.id, tryNumber: claim.tryNumber, attemptToken: claim.attemptToken };
  await db.sql`update task_instances set state = 'running' where id = ${a.id}`;
  return { runId: run.id, attempt };
}

const success = { outcome: 'success' as const, exitCode: 0, signal: null, error: null };

describe('runs read behind the ends', () => {
  it('sees the end it follows (the read is sent after the write on the same connection)', async () => {
    const { runId, attempt } = await runningChain();
    const memory = new PlannerMemory(100);
    const w = watching(db.sql);
    const reports = createReportBatcher(w.sql, { retryMs: 1000, logs: quietLogWriter(db.sql) });
    reports.endsSent.register((on, ends) =>
      memory.readBehindEnds(
        on,
        ends.map((e) => e.tiId),
      ),
    );
    expect(await reports.finished(attempt, success)).toEqual({ verdict: 'success', runId });
    // The end and the reads all went down one reserved connection, none through the pool.
    expect([w.reserved(), w.direct()]).toEqual([1, 0]);
    const read = memory.takeReads([runId]).get(runId);
    expect(read?.run.state).toBe('running');
    expect(Object.fromEntries(read!.tis.map((t) => [t.task_id, t.state]))).toEqual({ a: 'success', b: 'none' });
    // Taken once: a second step finds nothing kept and reads for itself.
    expect(memory.takeReads([runId]).size).toBe(0);
  });

  it('does not keep a read its run changed after (a clear, a cancel, news from another replica)', async () => {
    const { runId, attempt } = await runningChain();
    const memory = new PlannerMemory(100);
    const reports = createReportBatcher(db.sql, { retryMs: 1000, logs: quietLogWriter(db.sql) });
    reports.endsSent.register((on, ends) => {
      const reading = memory.readBehindEnds(
        on,
        ends.map((e) => e.tiId),
      );
      // The run changes while its read is on the wire.
      memory.changed([runId]);
      return reading;
    });
    await reports.finished(attempt, success);
    expect(memory.takeReads([runId]).size).toBe(0);
  });

  it('drops every kept read when told everything changed, and keeps nothing of a run no longer active', async () => {
    const one = await runningChain();
    const two = await runningChain();
    const memory = new PlannerMemory(100);
    const reports = createReportBatcher(db.sql, { retryMs: 1000, logs: quietLogWriter(db.sql) });
    reports.endsSent.register((on, ends) =>
      memory.readBehindEnds(
        on,
        ends.map((e) => e.tiId),
      ),
    );
    await reports.finished(one.attempt, success);
    expect(memory.readsKept).toBe(1);
    memory.changed(); // no runs named: everything
    expect(memory.readsKept).toBe(0);

    await db.sql`update dag_runs set state = 'failed' where id = ${two.runId}`;
    await reports.finished(two.attempt, success);
    expect(memory.takeReads([two.runId]).size).toBe(0);
  });

  it('keeps a run as created (the rows that created it are what the planner reads), until it changes', async () => {
    const spec = dag(`pf${++seq}`, [task('a'), task('b', { dependsOn: ['a'] })]);
    const { dag: row } = await upsertDag(db.sql, spec, `${spec.dagId}.yaml`);
    const make = (key: string) =>
      createRun(db.sql, {
        dagId: spec.dagId,
        dagVersion: row.version,
        runKey: key,
        runType: 'manual',
        logicalDate: new Date(),
        conf: {},
        defaultExecutor: 'subprocess',
      });
    const first = await make('one');
    await db.sql`update dag_runs set state = 'running' where id = ${first.run.id}`;
    const created = await make('two');
    expect(created.created).toBe(true);
    // Exactly what a read of the run gives (its version's spec, as the created read carries it), its
    // DAG's running runs counted.
    expect(created.read!.tis).toEqual(await listTis(db.sql, created.run.id));
    const [read] = await activeRuns(db.sql, 10, { runIds: [created.run.id] });
    expect(created.read!.runningInDag).toBe(1);
    expect(read!.running_in_dag).toBe(1);
    expect({ ...created.run, spec: created.read!.spec, dag_paused: false, running_in_dag: 1 }).toEqual(read);
    // Not created again: nothing to plan from.
    expect((await make('two')).read).toBeUndefined();

    const memory = new PlannerMemory(100);
    memory.keepRead({ run: read!, tis: created.read!.tis });
    expect(memory.takeReads([created.run.id]).get(created.run.id)?.tis).toHaveLength(2);
    memory.keepRead({ run: read!, tis: created.read!.tis });
    memory.changed([created.run.id]);
    expect(memory.takeReads([created.run.id]).size).toBe(0);
  });

  it("creates a run of the DAG's current version in one statement, knowing whether the DAG is paused, or says there is no such DAG", async () => {
    const spec = dag(`pf${++seq}`, [task('a'), task('b', { dependsOn: ['a'], executor: 'agents', retries: 2 })]);
    await upsertDag(db.sql, spec, `${spec.dagId}.yaml`);
    const { dag: v2 } = await upsertDag(db.sql, { ...spec, description: 'v2' }, `${spec.dagId}.yaml`);
    await db.sql`update dags set paused = true where dag_id = ${spec.dagId}`;
    const made = {
      dagId: spec.dagId,
      runKey: 'k',
      runType: 'manual' as const,
      logicalDate: new Date(),
      conf: { x: 1 },
      defaultExecutor: 'subprocess',
    };
    const created = await createRunOfDag(db.sql, made);
    expect(created!.created).toBe(true);
    expect(created!.run.dag_version).toBe(v2.version);
    expect(created!.read!.dagPaused).toBe(true);
    expect(created!.read!.tis).toEqual(await listTis(db.sql, created!.run.id));
    // The task instances as createRun makes them from a spec: max tries, executors, the reason.
    expect(created!.read!.tis.map((t) => [t.task_id, t.max_tries, t.executor, t.state, t.pending_reason])).toEqual([
      ['a', 1, 'subprocess', 'none', 'RUN_QUEUED'],
      ['b', 3, 'agents', 'none', 'RUN_QUEUED'],
    ]);
    const again = await createRunOfDag(db.sql, made);
    expect(again).toMatchObject({ created: false, run: { id: created!.run.id } });
    expect(again!.read).toBeUndefined();
    expect(await createRunOfDag(db.sql, { ...made, dagId: 'no_such_dag' })).toBeNull();
  });
});
