import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { applyDagFile, triggerByCli } from '../helpers/dag-file.js';
import { waitFor, type ServerProcess } from '../helpers/leoflow-process.js';
import { isAlive as alive, killGroupOf as killGroup } from '../helpers/process-group.js';
import { runEnds } from '../helpers/run-ends.js';
import { FAST_FAULT_FLAGS } from '../helpers/fault-flags.js';
import { replicasForFile } from '../helpers/server-fixture.js';

/**
 * Task process SIGKILLed → retried or failed. The tasks record each try in a file and write
 * their pid (`$$`, the leader of the process group the executor spawned) to a pid file, so the
 * test can find and kill them. Every process started here is stopped, also when a test fails.
 */

const f = replicasForFile({ tmpPrefix: 'leoflow-fault-killed-', eachTest: true });
/** Task processes that may outlive their control plane (detached process groups). */
const { taskPids } = f;
const start = f.launcher(FAST_FAULT_FLAGS);

/** The victim's moves (`to/try`) when try 1 is SIGKILLed and try 2 succeeds. */
const KILLED_THEN_RETRIED = [
  'scheduled/0',
  'queued/1',
  'running/1',
  'up_for_retry/1',
  'scheduled/1',
  'queued/2',
  'running/2',
  'success/2',
];

/**
 * A DAG of `victim` (retries as given; try 1 writes its pid and sleeps, later tries succeed at
 * once) and `after`, which depends on it. Both record `task try` in `ran`.
 */
async function applyDag(
  server: ServerProcess,
  dagId: string,
  retries: number,
): Promise<{ ran: string; pidFile: string }> {
  const ran = path.join(f.tmp, `${dagId}.ran`);
  const pidFile = path.join(f.tmp, `${dagId}.pid`);
  const record = `echo $LEOFLOW_TASK_ID $LEOFLOW_TRY_NUMBER >> ${ran}`;
  await applyDagFile(server.url, f.tmp, {
    dagId,
    tasks: [
      '  - id: victim',
      `    command: ["sh", "-c", "${record}; [ \\"$LEOFLOW_TRY_NUMBER\\" -ge 2 ] && exit 0; echo $$ > ${pidFile}; sleep 30"]`,
      `    retries: ${retries}`,
      '    retry_delay: 200ms',
      '  - id: after',
      `    command: ["sh", "-c", "${record}"]`,
      '    depends_on: [victim]',
    ],
  });
  return { ran, pidFile };
}

/**
 * A server, the DAG `dagId` (victim with `retries`) applied and triggered, and try 1 of its
 * victim SIGKILLed once it runs. Resolves with the server, the file the tasks record their tries
 * in, the run and the killed pid.
 */
async function killedWhileRunning(dagId: string, retries: number) {
  const server = await start();
  const { ran, pidFile } = await applyDag(server, dagId, retries);
  const runId = await triggerByCli(server.url, dagId);
  const pid = await runningPid(runId, pidFile);
  process.kill(pid, 'SIGKILL');
  return { server, ran, runId, pid };
}

/** Resolves the pid of try 1 once it is running and has written its pid file. */
async function runningPid(runId: string, pidFile: string): Promise<number> {
  await waitFor('victim running', async () => {
    const [row] = await f.db.sql<
      { state: string }[]
    >`select state from task_instances where run_id = ${runId} and task_id = 'victim'`;
    return row?.state === 'running';
  });
  const pid = Number(
    await waitFor('pid file', async () => (await readFile(pidFile, 'utf8').catch(() => '')).trim() || null),
  );
  expect(alive(pid)).toBe(true);
  taskPids.add(pid);
  return pid;
}

async function tis(runId: string) {
  return f.db.sql<
    { task_id: string; state: string; try_number: number; exit_code: number | null; error: string | null }[]
  >`
    select task_id, state, try_number, exit_code, error from task_instances where run_id = ${runId} order by task_id`;
}

/** The ti.state events of one task, in order. */
async function moves(runId: string, taskId: string) {
  return f.db.sql<{ to: string; try: number; error: string | null; reason: string | null }[]>`
    select payload->>'to' as to, (payload->>'try')::int as try, payload->>'error' as error, payload->>'reason' as reason
    from events where run_id = ${runId} and kind = 'ti.state' and payload->>'task_id' = ${taskId} order by seq`;
}

describe('task process SIGKILLed', () => {
  it('with a retry left: up_for_retry "killed by SIGKILL", try 2 succeeds, the run succeeds', async () => {
    const { server, ran, runId, pid } = await killedWhileRunning('killed_retry', 1);

    expect(await runEnds(f.db.sql, runId)).toBe('success');
    expect(await tis(runId)).toEqual([
      { task_id: 'after', state: 'success', try_number: 1, exit_code: 0, error: null },
      { task_id: 'victim', state: 'success', try_number: 2, exit_code: 0, error: null },
    ]);
    const victim = await moves(runId, 'victim');
    expect(victim.map((m) => `${m.to}/${m.try}`)).toEqual(KILLED_THEN_RETRIED);
    expect(victim[3]!.error).toBe('killed by SIGKILL');
    expect(victim.some((m) => m.reason === 'agent_lost')).toBe(false);
    expect((await readFile(ran, 'utf8')).trim().split('\n')).toEqual(['victim 1', 'victim 2', 'after 1']);
    expect(alive(pid)).toBe(false);
    expect(server.child.exitCode).toBeNull();
  });

  it('with no retry left: the TI fails, the run fails, downstream is upstream_failed', async () => {
    const { ran, runId } = await killedWhileRunning('killed_final', 0);

    expect(await runEnds(f.db.sql, runId)).toBe('failed');
    expect(await tis(runId)).toEqual([
      { task_id: 'after', state: 'upstream_failed', try_number: 0, exit_code: null, error: null },
      { task_id: 'victim', state: 'failed', try_number: 1, exit_code: null, error: 'killed by SIGKILL' },
    ]);
    expect((await readFile(ran, 'utf8')).trim().split('\n')).toEqual(['victim 1']);
  });

  it("machine gone: the control plane and the task's shim are SIGKILLed; the restart records the attempt killed and retries it", async () => {
    const stateDir = path.join(f.tmp, 'machine-gone.state');
    const first = await start(['--state-dir', stateDir]);
    const { ran, pidFile } = await applyDag(first, 'machine_gone', 1);
    const runId = await triggerByCli(first.url, 'machine_gone');
    const pid = await runningPid(runId, pidFile);

    // As a reboot would: the server, and the task with its shim (its whole process group).
    await first.kill();
    killGroup(pid);
    await waitFor('task and shim gone', async () => !alive(pid), 5000);

    // The attempt's folder says the shim died with no exit status: recorded at once as killed,
    // without waiting for the heartbeat threshold, and retried under the task's policy.
    const second = await start(['--state-dir', stateDir]);
    expect(await runEnds(f.db.sql, runId)).toBe('success');

    const victim = await moves(runId, 'victim');
    expect(victim.map((m) => `${m.to}/${m.try}`)).toEqual(KILLED_THEN_RETRIED);
    expect(victim[3]!.error).toBe('killed by SIGKILL');
    expect(victim[3]!.reason).not.toBe('agent_lost');
    const [v] = (await tis(runId)).filter((t) => t.task_id === 'victim');
    expect(v).toMatchObject({ state: 'success', try_number: 2, exit_code: 0 });
    expect((await readFile(ran, 'utf8')).trim().split('\n')).toEqual(['victim 1', 'victim 2', 'after 1']);
    expect(second.logs.some((l) => l.msg === 'adopted the attempts an earlier process left' && l.recorded === 1)).toBe(
      true,
    );
    expect((await second.stop()).code).toBe(0);
  });
});
