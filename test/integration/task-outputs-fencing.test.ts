import pino from 'pino';
import { describe, expect, it } from 'vitest';
import type { Attempt, AttemptResult } from '../../src/core/attempt.js';
import { createAttemptStore } from '../../src/db/attempt-store.js';
import { attemptInputs } from '../../src/db/attempts/attempt-inputs.js';
import { createReportBatcher } from '../../src/db/attempts/report-batcher.js';
import { taskOutputs } from '../../src/db/attempts/task-output.js';
import { clearTaskInstance } from '../../src/db/clear-task-instance.js';
import { listTis } from '../../src/db/tis.js';
import { attemptFixtures, type AttemptRef } from '../helpers/attempt-fixtures.js';
import { quietLogWriter } from '../helpers/quiet-log-writer.js';
import { dag, task } from '../helpers/spec-builders.js';
import { databaseForFile } from '../helpers/test-database.js';

/**
 * Outputs are stored by the statement that records an attempt's end, fenced by its token: a
 * zombie's output is refused (and counted), each try keeps its own, and a clear keeps them all.
 */
const db = databaseForFile({ emptyEach: true });
const fx = attemptFixtures(() => db.sql, 'agents');

const ok = (output: unknown): AttemptResult => ({
  outcome: 'success',
  exitCode: 0,
  signal: null,
  error: null,
  output: JSON.stringify(output),
});
const failed = (output: unknown): AttemptResult => ({
  outcome: 'failed',
  exitCode: 1,
  signal: null,
  error: 'exit code 1',
  output: JSON.stringify(output),
});

function store(rejected: string[]) {
  const reports = createReportBatcher(db.sql, { retryMs: 1000, logs: quietLogWriter(db.sql) });
  return createAttemptStore(db.sql, reports, quietLogWriter(db.sql), pino({ level: 'silent' }), {
    onOutputRejected: (a) => rejected.push(`${a.tiId}/${a.tryNumber}`),
  });
}

const attemptOf = (runId: string, ref: AttemptRef): Attempt =>
  ({ ...ref, runId, dagId: 'outs', taskId: 'a' }) as unknown as Attempt;

describe('task outputs, fenced by the attempt token', () => {
  it("refuses a zombie's output, keeps every try's own, and keeps them through a clear", async () => {
    const spec = dag('outs', [task('a', { retries: 2 }), task('b', { dependsOn: ['a'] })]);
    const { run, tis } = await fx.runningRun(spec);
    const rejected: string[] = [];
    const s = store(rejected);
    const try1 = await fx.started(run.id, tis.get('a')!);
    // Try 1 ends with no output (its process lost): a zombie's late output would be its only one.
    const { output: _none, ...noOutput } = failed(null);
    await s.finished(attemptOf(run.id, try1), noOutput);
    const [ti1] = (await listTis(db.sql, run.id)).filter((t) => t.task_id === 'a');
    expect(ti1!.state).toBe('up_for_retry');
    const try2 = await fx.started(run.id, ti1!);
    // Try 1's process, superseded, reports again (a zombie): its output must not land.
    await s.finished(attemptOf(run.id, try1), ok({ zombie: true }));
    expect(rejected).toEqual([`${try1.tiId}/1`]);
    await s.finished(attemptOf(run.id, try2), ok({ try: 2 }));
    expect((await taskOutputs(db.sql, run.id, 'a')).map((o) => [o.tryNumber, JSON.parse(o.json)])).toEqual([
      [2, { try: 2 }],
    ]);
    // The downstream reads the try that succeeded.
    expect(
      await attemptInputs(db.sql, { runId: run.id, taskId: 'b', upstreams: ['a'], inputEnv: { T: 'a.try' } }),
    ).toEqual({ json: '{"a":{"try": 2}}', env: { T: '2' } });

    // A clear: the next try writes its own row; the earlier tries' stay.
    expect((await clearTaskInstance(db.sql, { runId: run.id, taskId: 'a', downstream: false })).kind).toBe('cleared');
    const [ti3] = (await listTis(db.sql, run.id)).filter((t) => t.task_id === 'a');
    const try3 = await fx.started(run.id, ti3!);
    expect(try3.tryNumber).toBe(3);
    await s.finished(attemptOf(run.id, try3), ok({ try: 3 }));
    expect((await taskOutputs(db.sql, run.id, 'a')).map((o) => o.tryNumber)).toEqual([3, 2]);
    expect((await taskOutputs(db.sql, run.id, 'a', 2)).map((o) => JSON.parse(o.json))).toEqual([{ try: 2 }]);
    // Try 2's process, long superseded, reports once more: still refused.
    await s.finished(attemptOf(run.id, try2), ok({ late: true }));
    expect(rejected).toHaveLength(2);
    const [row] = await db.sql<{ n: number }[]>`select count(*)::int as n from task_outputs`;
    expect(row!.n).toBe(2);
  });

  it("refuses a zombie's output when its Started and Finished are written together", async () => {
    const spec = dag('outs2', [task('a', { retries: 1 })]);
    const { run, tis } = await fx.runningRun(spec);
    const stale = await fx.claim(run.id, tis.get('a')!);
    // The claim is given a new token (as a reaper's retry would), so the first one is stale.
    await db.sql`update task_instances set attempt_token = gen_random_uuid() where id = ${stale.tiId}`;
    const reports = createReportBatcher(db.sql, { retryMs: 1000, logs: quietLogWriter(db.sql) });
    const [started, ended] = await Promise.all([
      reports.started(stale, { pid: 1, agentId: 'agent-1' }),
      reports.finished(stale, ok({ zombie: true })),
    ]);
    expect(started).toBe(false);
    expect(ended.verdict).toBe('rejected');
    expect(await taskOutputs(db.sql, run.id, 'a')).toEqual([]);
  });
});
