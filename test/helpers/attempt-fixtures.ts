import { expect } from 'vitest';
import type { DagSpec } from '../../src/core/dag-spec.js';
import { claimAttempt } from '../../src/db/attempts/claim-attempt.js';
import { startAttempt } from '../../src/db/attempts/start-attempt.js';
import { upsertDag } from '../../src/db/dags.js';
import { createRun, transitionRun, type RunRow } from '../../src/db/runs.js';
import type { Sql } from '../../src/db/sql.js';
import { listTis, transitionTis, type TiRow } from '../../src/db/tis.js';

export interface AttemptRef {
  tiId: string;
  tryNumber: number;
  attemptToken: string;
}

/**
 * Runs and attempts written straight to the store, as the scheduler and a dispatcher would, for
 * tests of the reapers and the store: a queued or running run, a claimed attempt, a started one. `db` is
 * read at each call, so the fixtures can be made before the test's database exists.
 */
export function attemptFixtures(db: () => Sql, executor: 'subprocess' | 'agents') {
  let runSeq = 0;

  /**
   * A queued run of `spec` (the DAG applied first), its task instances still `none`, by task id.
   * Its logical date is a fixed day unless given.
   */
  async function queuedRun(
    spec: DagSpec,
    o: { conf?: Record<string, unknown>; logicalDate?: Date } = {},
  ): Promise<{ run: RunRow; tis: Map<string, TiRow> }> {
    const sql = db();
    const { dag: row } = await upsertDag(sql, spec, `${spec.dagId}.yaml`);
    const { run } = await sql.begin((tx) =>
      createRun(tx, {
        dagId: spec.dagId,
        dagVersion: row.version,
        runKey: `manual__${++runSeq}`,
        runType: 'manual',
        logicalDate: o.logicalDate ?? new Date('2026-02-01T00:00:00Z'),
        conf: o.conf ?? {},
        defaultExecutor: executor,
      }),
    );
    return { run, tis: await tisOf(run.id) };
  }

  async function tisOf(runId: string): Promise<Map<string, TiRow>> {
    return new Map((await listTis(db(), runId)).map((t) => [t.task_id, t]));
  }

  /** A running run of `spec`, its task instances still `none`, by task id. */
  async function runningRun(spec: DagSpec): Promise<{ run: RunRow; tis: Map<string, TiRow> }> {
    const { run } = await queuedRun(spec);
    expect(await transitionRun(db(), run.id, 'running')).toBe(true);
    return { run, tis: await tisOf(run.id) };
  }

  /**
   * The one task of `spec` claimed for agent `agentId` (queued, try 1): the attempt an Assign
   * would carry. The run and the TI are put in place by hand (no events), as a test arranges them.
   */
  async function claimedFor(agentId: string, spec: DagSpec): Promise<AttemptRef & { agentId: string }> {
    const sql = db();
    const { run, tis } = await queuedRun(spec, { logicalDate: new Date() });
    const [ti] = tis.values();
    await sql`update dag_runs set state = 'running' where id = ${run.id}`;
    await sql`update task_instances set state = 'scheduled' where id = ${ti!.id}`;
    const c = (await claimAttempt(sql, ti!.id, executor, agentId))!;
    return { tiId: ti!.id, tryNumber: c.tryNumber, attemptToken: c.attemptToken, agentId };
  }

  /** What a dispatcher does: scheduled → queued with a new attempt. */
  async function claim(runId: string, ti: TiRow): Promise<AttemptRef> {
    const sql = db();
    if (ti.state === 'none' || ti.state === 'up_for_retry') await transitionTis(sql, runId, [ti.task_id], 'scheduled');
    const c = await claimAttempt(sql, ti.id, executor);
    expect(c, `claim of ${ti.task_id}`).not.toBeNull();
    return { tiId: ti.id, tryNumber: c!.tryNumber, attemptToken: c!.attemptToken };
  }

  /** Claimed and started on agent-1: running, with a fresh heartbeat. */
  async function started(runId: string, ti: TiRow): Promise<AttemptRef> {
    const sql = db();
    const a = await claim(runId, ti);
    expect(await startAttempt(sql, a, { pid: 4242, agentId: 'agent-1' })).toBe(true);
    return a;
  }

  return { queuedRun, runningRun, claimedFor, claim, started };
}
