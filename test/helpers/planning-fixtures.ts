/**
 * What the planner's integration tests (test/integration/plan*.test.ts) share: tasks that echo
 * their id, a step that must report no failed phase, a queued run, the states of a run and its
 * TIs, and an executor's claim-start-finish of a TI.
 */
import { expect } from 'vitest';
import type { AttemptResult } from '../../src/core/attempt.js';
import type { DagSpec } from '../../src/core/dag-spec.js';
import { claimAttempt } from '../../src/db/attempts/claim-attempt.js';
import { finishAttempt, type FinishVerdict } from '../../src/db/attempts/finish-attempt.js';
import { startAttempt } from '../../src/db/attempts/start-attempt.js';
import { getRun, type RunRow } from '../../src/db/runs.js';
import type { Sql } from '../../src/db/sql.js';
import { listTis, type TiRow } from '../../src/db/tis.js';
import { step } from '../../src/scheduler/step.js';
import { attemptFixtures } from './attempt-fixtures.js';
import { schedulerHarness, type HarnessOptions, type SchedulerHarness } from './scheduler-harness.js';
import { task as baseTask } from './spec-builders.js';

/** These tests' tasks echo their id unless told otherwise. */
export const task: typeof baseTask = (id, over = {}) => baseTask(id, { command: ['sh', '-c', `echo ${id}`], ...over });

export const BOUND = { timeout: 15_000 };

export const OK: AttemptResult = { exitCode: 0, signal: null, error: null, outcome: 'success' };
export const FAIL: AttemptResult = { exitCode: 2, signal: null, error: 'exit code 2', outcome: 'failed' };

/** Steps once and checks the step itself reported no failed phase. */
export async function stepOk(h: SchedulerHarness) {
  const r = await step(h.ctx);
  expect(r.failedPhases).toEqual([]);
  expect(r.plan).not.toBeNull();
  return r.plan!;
}

/** The fixtures bound to a test file's database (`db.sql` read when called: it is made per file). */
export function planningFixtures(db: { readonly sql: Sql }) {
  const fixtures = attemptFixtures(() => db.sql, 'subprocess');
  const tiMap = async (runId: string): Promise<Map<string, TiRow>> =>
    new Map((await listTis(db.sql, runId)).map((t) => [t.task_id, t]));
  /** What an executor does with a scheduled TI: claim it, start it, finish it. */
  const execute = async (tiId: string, result: AttemptResult, executor = 'subprocess'): Promise<FinishVerdict> => {
    const claim = await claimAttempt(db.sql, tiId, executor);
    expect(claim, `claim of TI ${tiId}`).not.toBeNull();
    const a = { tiId, tryNumber: claim!.tryNumber, attemptToken: claim!.attemptToken };
    expect(await startAttempt(db.sql, a, { pid: 1234, agentId: null })).toBe(true);
    return finishAttempt(db.sql, a, result);
  };
  return {
    harness: (over: HarnessOptions = {}) => schedulerHarness(db.sql, over),
    trigger: async (spec: DagSpec, conf: Record<string, unknown> = {}): Promise<RunRow> =>
      (await fixtures.queuedRun(spec, { conf })).run,
    tiMap,
    states: async (runId: string): Promise<Record<string, string>> =>
      Object.fromEntries((await listTis(db.sql, runId)).map((t) => [t.task_id, t.state])),
    runState: async (runId: string) => (await getRun(db.sql, runId))!.state,
    execute,
    executeTask: async (runId: string, taskId: string, result: AttemptResult) =>
      execute((await tiMap(runId)).get(taskId)!.id, result),
  };
}
