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
 * tests of the reapers and the store: a running run, a claimed attempt, a started one. `db` is
 * read at each call, so the fixtures can be made before the test's database exists.
 */
export function attemptFixtures(db: () => Sql, executor: 'subprocess' | 'agents') {
  let runSeq = 0;

  /** A running run of `spec`, its task instances still `none`, by task id. */
  async function runningRun(spec: DagSpec): Promise<{ run: RunRow; tis: Map<string, TiRow> }> {
    const sql = db();
    const { dag: row } = await upsertDag(sql, spec, `${spec.dagId}.yaml`);
    const { run } = await sql.begin((tx) =>
      createRun(tx, {
        dagId: spec.dagId,
        dagVersion: row.version,
        runKey: `manual__${++runSeq}`,
        runType: 'manual',
        logicalDate: new Date('2026-02-01T00:00:00Z'),
        conf: {},
        defaultExecutor: executor,
      }),
    );
    expect(await transitionRun(sql, run.id, 'running')).toBe(true);
    return { run, tis: new Map((await listTis(sql, run.id)).map((t) => [t.task_id, t])) };
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

  return { runningRun, claim, started };
}
