import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { RunState, TaskState } from '../../src/gen/leoflow/v1/types_pb.js';
import { cli, waitFor } from '../helpers/leoflow-process.js';
import { serverForFile } from '../helpers/server-fixture.js';
import { runEndsByApi } from '../helpers/api-run-ends.js';

/**
 * Waits and approvals on Lite with its defaults, from the CLI: a DAG waits for an event that
 * `leoflow event send` sends, and for an approval that `leoflow run approve` gives, holding no
 * process meanwhile; then its last task runs.
 */

const f = serverForFile({ tmpPrefix: 'leoflow-waits-' });

const DAG = `dag_id: release
tasks:
  - id: build
    command: ["true"]
  - id: landed
    depends_on: [build]
    wait: { event: artifact.ready, match: { version: $conf.version }, timeout: 1h }
  - id: sign_off
    depends_on: [landed]
    approval: { role: operator, timeout: 24h, message: "Ship it?" }
  - id: ship
    depends_on: [sign_off]
    command: ["sh", "-c", "echo shipped"]
`;

async function tiOf(runId: string, taskId: string) {
  const res = await f.api.workflow.getRun({ runId });
  return res.taskInstances.find((t) => t.taskId === taskId)!;
}

const waiting = (runId: string, taskId: string) =>
  waitFor(
    `${taskId} to wait`,
    async () => {
      const ti = await tiOf(runId, taskId);
      return ti.state === TaskState.WAITING ? ti : null;
    },
    30_000,
  );

describe('a DAG with a wait and an approval, on Lite', () => {
  it('waits for the event sent by `leoflow event send`, then for `leoflow run approve`, then runs on', async () => {
    const file = path.join(f.tmp, 'release.yaml');
    writeFileSync(file, DAG);
    let r = await cli(f.server.url, ['dag', 'apply', file]);
    expect(r.code, r.stderr).toBe(0);
    // `dag show` says what each task waits for.
    const shown = await cli(f.server.url, ['dag', 'show', 'release']);
    expect(shown.stdout).toMatch(
      /landed\s+default\s+build\s+\(wait for event artifact\.ready \{"version":"\$conf\.version"\}\)/,
    );
    expect(shown.stdout).toMatch(/sign_off\s+default\s+landed\s+\(approval by operator or above\)/);
    const json = JSON.parse((await cli(f.server.url, ['dag', 'show', 'release', '-o', 'json'])).stdout) as {
      tasks: Record<string, unknown>[];
    };
    expect(json.tasks[2]).toMatchObject({ id: 'sign_off', approval: { role: 'operator', message: 'Ship it?' } });
    const run = (await f.api.workflow.triggerRun({ dagId: 'release', confJson: '{"version":"1.4"}' })).run!;

    const landed = await waiting(run.runId, 'landed');
    expect(landed.pendingReason).toBe('WAITING_FOR_EVENT:artifact.ready {"version":"1.4"}');
    expect(landed.tryNumber).toBe(0);

    // Another version's event leaves it waiting.
    r = await cli(f.server.url, ['event', 'send', 'artifact.ready', '--payload', '{"version":"1.3"}']);
    expect(r.code, r.stderr).toBe(0);
    await new Promise((res) => setTimeout(res, 1500));
    expect((await tiOf(run.runId, 'landed')).state).toBe(TaskState.WAITING);

    r = await cli(f.server.url, ['event', 'send', 'artifact.ready', '--payload', '{"version":"1.4","url":"x"}']);
    expect(r.code, r.stderr).toBe(0);
    const gate = await waiting(run.runId, 'sign_off');
    expect((await tiOf(run.runId, 'landed')).state).toBe(TaskState.SUCCESS);
    expect(gate.pendingReason).toBe('WAITING_FOR_APPROVAL:operator');

    // `run show` names what it waits for.
    const show = await cli(f.server.url, ['run', 'show', run.runId]);
    expect(show.stdout).toMatch(/sign_off\s+waiting.*WAITING_FOR_APPROVAL:operator/);

    r = await cli(f.server.url, ['run', 'approve', run.runId, 'sign_off', '--note', 'release notes read']);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toBe(`approved task sign_off of run ${run.runId}: success\n`);

    const done = await runEndsByApi(f.api, run.runId, 'the run to end');
    expect(done.state).toBe(RunState.SUCCESS);
    const logs = await cli(f.server.url, ['logs', run.runId]);
    expect(logs.stdout).toContain('[ship #1] shipped');

    // Who approved, when and the note are in the run's events.
    const [ev] = await f.db.sql<{ payload: Record<string, unknown> }[]>`
      select e.payload from events e join task_instances t on t.id = e.ti_id
      where t.run_id = ${run.runId} and t.task_id = 'sign_off' and e.payload->>'ended_by' = 'approved'`;
    expect(ev!.payload).toMatchObject({ actor: 'local', note: 'release notes read', to: 'success' });

    // Approving it again: FAILED_PRECONDITION, exit 1.
    const again = await cli(f.server.url, ['run', 'approve', run.runId, 'sign_off', '--reject']);
    expect(again.code).not.toBe(0);
    expect(again.stderr).toMatch(/not waiting for an approval/);
  });

  it("matches an event against the wait's inputs: $inputs.TASK.PATH is its upstream's output", async () => {
    const source = `dag_id: batch_ack
tasks:
  - id: submit
    command: ["sh", "-c", "echo '{\\"batch\\": {\\"id\\": \\"b-17\\"}}' > \\"$LEOFLOW_OUTPUT\\""]
  - id: acked
    depends_on: [submit]
    wait: { event: batch.acked, match: { batch: $inputs.submit.batch.id, env: $conf.env }, timeout: 1h }
  - id: after
    depends_on: [acked]
    inputs: { B: acked.batch }
    command: ["sh", "-c", "echo \\"{\\\\\\"got\\\\\\": \\\\\\"$B\\\\\\"}\\" > \\"$LEOFLOW_OUTPUT\\""]
`;
    await f.api.workflow.applyDag({ source, filename: 'batch_ack.yaml' });
    const run = (await f.api.workflow.triggerRun({ dagId: 'batch_ack', confJson: '{"env":"prod"}' })).run!;
    const acked = await waiting(run.runId, 'acked');
    expect(acked.pendingReason).toBe('WAITING_FOR_EVENT:batch.acked {"batch":"$inputs.submit.batch.id","env":"prod"}');
    // Another batch's acknowledgement, and one of the right batch in another env, leave it waiting.
    for (const payload of ['{"batch":"b-16","env":"prod"}', '{"batch":"b-17","env":"dev"}']) {
      const r = await cli(f.server.url, ['event', 'send', 'batch.acked', '--payload', payload]);
      expect(r.code, r.stderr).toBe(0);
    }
    await new Promise((res) => setTimeout(res, 1500));
    expect((await tiOf(run.runId, 'acked')).state).toBe(TaskState.WAITING);
    const r = await cli(f.server.url, ['event', 'send', 'batch.acked', '--payload', '{"batch":"b-17","env":"prod"}']);
    expect(r.code, r.stderr).toBe(0);
    const done = await runEndsByApi(f.api, run.runId, 'the run to end');
    expect(done.state).toBe(RunState.SUCCESS);
    // The event's payload is the wait's output, and so the next task's input.
    const acks = JSON.parse((await cli(f.server.url, ['run', 'output', run.runId, 'acked'])).stdout) as Record<
      string,
      unknown
    >;
    expect(acks).toEqual({ batch: 'b-17', env: 'prod' });
    const got = await cli(f.server.url, ['run', 'output', run.runId, 'after']);
    expect(JSON.parse(got.stdout)).toEqual({ got: 'b-17' });
  });
});
