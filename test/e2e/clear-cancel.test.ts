import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { Code } from '@connectrpc/connect';
import { describe, expect, it } from 'vitest';
import { cli, waitFor } from '../helpers/leoflow-process.js';
import { isRunEnded } from '../helpers/run-ends.js';
import { serverForFile } from '../helpers/server-fixture.js';
import { rejectsWith } from '../helpers/rejects-with.js';
import { processEnds, processGone } from '../helpers/process-gone.js';
import { applyDag } from '../helpers/applied-dag.js';
import { runIdOf, showRun, type ShownTi } from '../helpers/run-show.js';

/**
 * Retry by hand (`run clear`) and cancelling one task (`run cancel --task`), end to end: the real
 * server process with the subprocess executor, driven by the real CLI and the API.
 */

async function show(runId: string): Promise<{ state: string; byTask: Map<string, ShownTi> }> {
  const shown = await showRun(f.server.url, runId);
  return { state: shown.state, byTask: new Map(shown.task_instances.map((t) => [t.task_id, t])) };
}

async function ended(runId: string, timeoutMs = 30_000) {
  return waitFor(
    `run ${runId} to end`,
    async () => {
      const s = await show(runId);
      return isRunEnded(s.state) ? s : null;
    },
    timeoutMs,
  );
}

const f = serverForFile({ tmpPrefix: 'leoflow-e2e-clear-', args: ['--kill-grace', '300ms'] });

describe('run clear', () => {
  let runId: string;

  it('a run fails because b fails; clearing b with its downstream re-opens the run, which succeeds', async () => {
    const mark = path.join(f.tmp, 'b.mark');
    await applyDag(
      f.server.url,
      f.tmp,
      `dag_id: flaky_chain\ntasks:\n  - id: a\n    command: [echo, a]\n` +
        `  - id: b\n    depends_on: [a]\n    command: "[ -f ${mark} ] || { touch ${mark}; echo 'b: first try fails' >&2; exit 1; }; echo 'b: ok'"\n` +
        `  - id: c\n    depends_on: [b]\n    command: [echo, c]\n`,
    );
    const t = await cli(f.server.url, ['run', 'trigger', 'flaky_chain', '--wait']);
    expect(t.code, t.stdout + t.stderr).toBe(1);
    runId = runIdOf(t.stdout);
    const failed = await show(runId);
    expect(failed.state).toBe('failed');
    expect(failed.byTask.get('b')).toMatchObject({ state: 'failed', try_number: 1, max_tries: 1, exit_code: 1 });
    expect(failed.byTask.get('c')).toMatchObject({ state: 'upstream_failed', try_number: 0 });

    const c = await cli(f.server.url, ['run', 'clear', runId, 'b', '--downstream']);
    expect(c.stderr).toBe('');
    expect(c.code).toBe(0);
    expect(c.stdout).toBe(`cleared b (and 1 downstream) in run ${runId}; run ${runId} is running\n`);

    const done = await ended(runId);
    expect(done.state).toBe('success');
    // b ran again as its next try, with a fresh budget (try 1 kept + its 0 retries + 1);
    // c never ran before, so it runs as its first try.
    expect(done.byTask.get('b')).toMatchObject({
      state: 'success',
      try_number: 2,
      max_tries: 2,
      exit_code: 0,
      error: null,
    });
    expect(done.byTask.get('c')).toMatchObject({ state: 'success', try_number: 1, max_tries: 1, exit_code: 0 });
    expect(done.byTask.get('a')).toMatchObject({ state: 'success', try_number: 1 });

    const logs = await cli(f.server.url, ['logs', runId, '--task', 'b']);
    expect(logs.stdout).toMatch(/^\[b #1 stderr\] b: first try fails$/m);
    expect(logs.stdout).toMatch(/^\[b #2\] b: ok$/m);

    const [reopen] = await f.db.sql<{ payload: Record<string, unknown> }[]>`
      select payload from events where run_id = ${runId} and kind = 'run.state' and payload->>'reason' = 'cleared'`;
    expect(reopen!.payload).toMatchObject({ to: 'running', from: 'failed', task_id: 'b' });
  });

  it('clears a task of a run that succeeded: only that task runs again', async () => {
    const c = await cli(f.server.url, ['run', 'clear', runId, 'a', '-o', 'json']);
    expect(c.code, c.stderr).toBe(0);
    expect(JSON.parse(c.stdout)).toEqual({
      run_id: runId,
      state: 'running',
      cleared: [{ task_id: 'a', try_number: 1, max_tries: 2 }],
    });
    const done = await ended(runId);
    expect(done.state).toBe('success');
    expect(done.byTask.get('a')).toMatchObject({ state: 'success', try_number: 2 });
    expect(done.byTask.get('b')).toMatchObject({ state: 'success', try_number: 2 });
    expect(done.byTask.get('c')).toMatchObject({ state: 'success', try_number: 1 });
  });

  it('answers unknown runs and tasks with NOT_FOUND and a non-zero exit', async () => {
    const noRun = await cli(f.server.url, ['run', 'clear', '999999', 'b']);
    expect(noRun.code).toBe(1);
    expect(noRun.stderr).toMatch(/not_found.*run 999999 not found/);
    const noTask = await cli(f.server.url, ['run', 'clear', runId, 'nope']);
    expect(noTask.code).toBe(1);
    expect(noTask.stderr).toMatch(new RegExp(`not_found.*run ${runId} has no task "nope"`));
    const noArg = await cli(f.server.url, ['run', 'clear', runId]);
    expect(noArg.code).toBe(2);
    expect(noArg.stderr).toMatch(/missing required argument 'task_id'/);
  });
});

describe('run cancel --task', () => {
  it('stops one running task; its downstream is upstream_failed, an independent branch succeeds, the run fails', async () => {
    const pidFile = path.join(f.tmp, 'sleeper.pid');
    await applyDag(
      f.server.url,
      f.tmp,
      `dag_id: branches\ntasks:\n` +
        `  - id: sleeper\n    command: ["sh", "-c", "echo $$ > ${pidFile}; sleep 60"]\n` +
        `  - id: after\n    depends_on: [sleeper]\n    command: [echo, after]\n` +
        `  - id: other\n    command: ["sh", "-c", "sleep 0.5; echo other"]\n` +
        `  - id: other2\n    depends_on: [other]\n    command: [echo, other2]\n`,
    );
    const t = await cli(f.server.url, ['run', 'trigger', 'branches']);
    const runId = runIdOf(t.stdout);
    await waitFor('sleeper running', async () => (await show(runId)).byTask.get('sleeper')?.state === 'running');
    const pid = Number(await waitFor('pid file', () => readFile(pidFile, 'utf8').catch(() => null)));
    expect(processGone(pid)).toBe(false);

    // Running, not ended: it cannot be cleared.
    const early = await cli(f.server.url, ['run', 'clear', runId, 'sleeper']);
    expect(early.code).toBe(1);
    expect(early.stderr).toMatch(
      /failed_precondition.*task "sleeper" of run \d+ is running: only a task instance that has ended/,
    );

    const c = await cli(f.server.url, ['run', 'cancel', runId, '--task', 'sleeper']);
    expect(c.stderr).toBe('');
    expect(c.code).toBe(0);
    expect(c.stdout).toBe(`task sleeper of run ${runId} cancelled\n`);
    await processEnds(pid, 5000, 'sleeper process gone');

    const done = await ended(runId);
    expect(done.state).toBe('failed');
    expect(done.byTask.get('sleeper')).toMatchObject({ state: 'cancelled', try_number: 1, error: 'cancelled by user' });
    expect(done.byTask.get('after')).toMatchObject({ state: 'upstream_failed', try_number: 0 });
    expect(done.byTask.get('other')).toMatchObject({ state: 'success', exit_code: 0 });
    expect(done.byTask.get('other2')).toMatchObject({ state: 'success', exit_code: 0 });

    const again = await cli(f.server.url, ['run', 'cancel', runId, '--task', 'sleeper']);
    expect(again.code).toBe(1);
    expect(again.stderr).toMatch(
      new RegExp(`failed_precondition.*task "sleeper" of run ${runId} has already ended \\(cancelled\\)`),
    );
    const ok = await cli(f.server.url, ['run', 'cancel', runId, '--task', 'other']);
    expect(ok.stderr).toMatch(/failed_precondition.*has already ended \(success\)/);
    // The run itself has ended too.
    const run = await cli(f.server.url, ['run', 'cancel', runId]);
    expect(run.stderr).toMatch(/failed_precondition.*run \d+ has already ended \(failed\)/);

    const noRun = await cli(f.server.url, ['run', 'cancel', '999999', '--task', 'sleeper']);
    expect(noRun.code).toBe(1);
    expect(noRun.stderr).toMatch(/not_found.*run 999999 not found/);
    const noTask = await cli(f.server.url, ['run', 'cancel', runId, '--task', 'nope']);
    expect(noTask.stderr).toMatch(new RegExp(`not_found.*run ${runId} has no task "nope"`));
  });
});

describe('the API', () => {
  it('names the missing or malformed field', async () => {
    await rejectsWith(f.api.workflow.clearTaskInstance({}), Code.InvalidArgument, /^run_id: is required$/);
    await rejectsWith(f.api.workflow.clearTaskInstance({ runId: '1' }), Code.InvalidArgument, /^task_id: is required$/);
    await rejectsWith(
      f.api.workflow.clearTaskInstance({ runId: '-5', taskId: 'a' }),
      Code.InvalidArgument,
      /^run_id: must be a positive integer id, got "-5"$/,
    );
    await rejectsWith(f.api.workflow.cancelTaskInstance({}), Code.InvalidArgument, /^run_id: is required$/);
    await rejectsWith(
      f.api.workflow.cancelTaskInstance({ runId: '1', taskId: '  ' }),
      Code.InvalidArgument,
      /^task_id: is required$/,
    );
    await rejectsWith(
      f.api.workflow.cancelTaskInstance({ runId: '424242', taskId: 'a' }),
      Code.NotFound,
      /^run 424242 not found$/,
    );
    await rejectsWith(
      f.api.workflow.clearTaskInstance({ runId: '424242', taskId: 'a' }),
      Code.NotFound,
      /^run 424242 not found$/,
    );
  });

  it('returns the run and the cleared task instances; refuses to cancel a task that has ended', async () => {
    const runs = (await f.api.workflow.listRuns({ dagId: 'flaky_chain' })).runs;
    const runId = runs[0]!.runId;
    const res = await f.api.workflow.clearTaskInstance({ runId, taskId: 'a', downstream: true });
    expect(res.run!.runId).toBe(runId);
    expect(res.cleared.map((t) => [t.taskId, t.tryNumber, t.maxTries])).toEqual([
      ['a', 2, 3],
      ['b', 2, 3],
      ['c', 1, 2],
    ]);
    const done = await ended(runId);
    expect(done.state).toBe('success');
    expect([...done.byTask.values()].map((t) => [t.task_id, t.try_number])).toEqual([
      ['a', 3],
      ['b', 3],
      ['c', 2],
    ]);
    await rejectsWith(
      f.api.workflow.cancelTaskInstance({ runId, taskId: 'c' }),
      Code.FailedPrecondition,
      /^task "c" of run \d+ has already ended \(success\)$/,
    );
  });
});
