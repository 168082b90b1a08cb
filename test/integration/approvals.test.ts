import { Code, ConnectError, createContextValues, type HandlerContext } from '@connectrpc/connect';
import pino from 'pino';
import { describe, expect, it } from 'vitest';
import type { TokenRole } from '../../src/core/api-role.js';
import { listTis } from '../../src/db/tis.js';
import { create } from '@bufbuild/protobuf';
import { ApproveTaskRequestSchema } from '../../src/gen/leoflow/v1/workflow_pb.js';
import { TaskState } from '../../src/gen/leoflow/v1/types_pb.js';
import { createWorkflowService, type WorkflowDeps } from '../../src/server/api/workflow-service.js';
import { callerKey, callerTokenKey } from '../../src/server/auth/caller.js';
import { step } from '../../src/scheduler/step.js';
import { attemptFixtures } from '../helpers/attempt-fixtures.js';
import { schedulerHarness } from '../helpers/scheduler-harness.js';
import { dag, task } from '../helpers/spec-builders.js';
import { databaseForFile } from '../helpers/test-database.js';

const BOUND = { timeout: 30_000 };
const db = databaseForFile({ emptyEach: true });
const fixtures = attemptFixtures(() => db.sql, 'subprocess');

const nudged: string[][] = [];
const service = () =>
  createWorkflowService({
    sql: db.sql,
    logger: pino({ level: 'silent' }),
    nudge: (ids?: string[]) => nudged.push(ids ?? []),
  } as unknown as WorkflowDeps);

/** A call's context as the token guard leaves it: a token of `role` (null: auth off, on loopback). */
function ctxOf(role: TokenRole | null): HandlerContext {
  const values = createContextValues();
  values.set(callerKey, { id: role ? `tok-${role}` : 'local', peer: '127.0.0.1:1' });
  if (role)
    values.set(callerTokenKey, {
      id: `tok-${role}`,
      name: role,
      role,
      agent_pattern: null,
      created_at: new Date(),
      expires_at: null,
      revoked_at: null,
    });
  return { values, signal: new AbortController().signal } as unknown as HandlerContext;
}

async function approve(
  runId: string,
  taskId: string,
  role: TokenRole | null,
  o: { reject?: boolean; note?: string } = {},
) {
  return service().approveTask(create(ApproveTaskRequestSchema, { runId, taskId, ...o }), ctxOf(role));
}

async function refusal(p: Promise<unknown>): Promise<ConnectError> {
  const err = await p.then(
    () => null,
    (e: unknown) => ConnectError.from(e),
  );
  expect(err, 'the call was refused').not.toBeNull();
  return err!;
}

const approvalTask = (id: string, role: 'operator' | 'admin' = 'operator') =>
  task(id, { command: [], approval: { role, timeoutMs: 3_600_000, onTimeout: 'failed', message: 'Ship it?' } });

async function waitingRun(spec: ReturnType<typeof dag>) {
  const { run } = await fixtures.queuedRun(spec);
  const r = await step(schedulerHarness(db.sql).ctx);
  expect(r.failedPhases).toEqual([]);
  return run;
}

async function stateOf(runId: string, taskId: string) {
  return (await listTis(db.sql, runId)).find((t) => t.task_id === taskId)!;
}

describe('ApproveTask', () => {
  it(
    'approves a waiting approval by a token of its role or above, once, recording who, when and the note',
    BOUND,
    async () => {
      const run = await waitingRun(dag('a_ok', [approvalTask('gate'), task('ship', { dependsOn: ['gate'] })]));
      const gate = await stateOf(run.id, 'gate');
      expect(gate).toMatchObject({ state: 'waiting', pending_reason: 'WAITING_FOR_APPROVAL:operator' });
      // What the person is asked is recorded with the move to waiting.
      const [asked] = await db.sql<{ payload: Record<string, unknown> }[]>`
      select payload from events where ti_id = ${gate.id} and payload->>'to' = 'waiting'`;
      expect(asked!.payload).toMatchObject({ reason: 'WAITING_FOR_APPROVAL:operator', message: 'Ship it?' });

      // A viewer never approves (the RPC needs operator; the handler checks the approval's role too).
      const viewer = await refusal(approve(run.id, 'gate', 'viewer'));
      expect(Code[viewer.code]).toBe('PermissionDenied');
      expect(viewer.rawMessage).toMatch(/needs role operator or above to approve; token "tok-viewer" has role viewer/);
      expect((await stateOf(run.id, 'gate')).state).toBe('waiting');

      const res = await approve(run.id, 'gate', 'operator', { note: 'looks good' });
      expect(res.taskInstance).toMatchObject({ taskId: 'gate', state: TaskState.SUCCESS });
      expect(nudged.at(-1)).toEqual([run.id]);
      const [ev] = await db.sql<{ payload: Record<string, unknown>; at: Date }[]>`
      select payload, at from events where ti_id = ${gate.id} and payload->>'to' = 'success'`;
      expect(ev!.payload).toMatchObject({
        from: 'waiting',
        ended_by: 'approved',
        actor: 'tok-operator',
        peer: '127.0.0.1:1',
        note: 'looks good',
      });
      expect(ev!.at).toBeInstanceOf(Date);

      // No longer waiting: FAILED_PRECONDITION, and nothing changes.
      const again = await refusal(approve(run.id, 'gate', 'admin', { reject: true }));
      expect(Code[again.code]).toBe('FailedPrecondition');
      expect((await stateOf(run.id, 'gate')).state).toBe('success');
    },
  );

  it('rejects: the task fails and its downstream with it; an admin approval refuses an operator', BOUND, async () => {
    const run = await waitingRun(dag('a_no', [approvalTask('gate', 'admin'), task('ship', { dependsOn: ['gate'] })]));
    const op = await refusal(approve(run.id, 'gate', 'operator'));
    expect(Code[op.code]).toBe('PermissionDenied');
    await approve(run.id, 'gate', 'admin', { reject: true, note: 'not today' });
    expect(await stateOf(run.id, 'gate')).toMatchObject({ state: 'failed', error: 'wait ended: rejected' });
    await step(schedulerHarness(db.sql).ctx);
    expect((await stateOf(run.id, 'ship')).state).toBe('upstream_failed');
  });

  it('times out by the leader with its on_timeout, and cannot be approved after', BOUND, async () => {
    const run = await waitingRun(
      dag('a_late', [
        task('gate', { command: [], approval: { role: 'operator', timeoutMs: 50, onTimeout: 'skipped' } }),
      ]),
    );
    await new Promise((r) => setTimeout(r, 120));
    const r = await step(schedulerHarness(db.sql).ctx);
    expect(r.endDueWaits).toMatchObject({ ended: 1, runIds: [run.id] });
    expect((await stateOf(run.id, 'gate')).state).toBe('skipped');
    expect(Code[(await refusal(approve(run.id, 'gate', 'admin'))).code]).toBe('FailedPrecondition');
  });

  it('with the API open on loopback, the local caller approves', BOUND, async () => {
    const run = await waitingRun(dag('a_open', [approvalTask('gate', 'admin')]));
    await approve(run.id, 'gate', null);
    expect((await stateOf(run.id, 'gate')).state).toBe('success');
  });

  it('refuses what is not a waiting approval, and what does not exist', BOUND, async () => {
    const run = await waitingRun(
      dag('a_bad', [
        task('w', { command: [], wait: { event: 'e', timeoutMs: 3_600_000, onTimeout: 'failed' } }),
        task('c'),
      ]),
    );
    const wait = await refusal(approve(run.id, 'w', 'admin'));
    expect(Code[wait.code]).toBe('FailedPrecondition');
    expect(wait.rawMessage).toMatch(/waits for an event, not an approval/);
    const cmd = await refusal(approve(run.id, 'c', 'admin'));
    expect(Code[cmd.code]).toBe('FailedPrecondition');
    expect(Code[(await refusal(approve(run.id, 'nope', 'admin'))).code]).toBe('NotFound');
    expect(Code[(await refusal(approve('999999', 'w', 'admin'))).code]).toBe('NotFound');
    const long = await refusal(approve(run.id, 'w', 'admin', { note: 'x'.repeat(2001) }));
    expect(Code[long.code]).toBe('InvalidArgument');
    expect(long.rawMessage).toMatch(/^note: must be at most 2000 characters, got 2001/);
  });
});
