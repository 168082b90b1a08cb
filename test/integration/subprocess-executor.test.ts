import { expect, it } from 'vitest';
import {
  attempt,
  cleanUpAfterEach,
  describeEachSpawnWay,
  setup,
  tempDir,
  waitFor,
} from '../helpers/subprocess-bench.js';
import { SUCCEEDED, exitedWith } from '../helpers/attempt-outcomes.js';

cleanUpAfterEach();

describeEachSpawnWay('subprocess executor', () => {
  it('captures stdout and stderr lines in order and reports success on exit 0', async () => {
    const { reporter, executor } = setup();
    const a = attempt(['sh', '-c', 'echo out1; echo err1 >&2; echo out2; echo err2 >&2']);
    await executor.dispatch(a);
    expect(reporter.startedCalls).toEqual([{ tiId: a.tiId, pid: expect.any(Number) }]);
    expect(await reporter.finishedOf(a.tiId)).toEqual(SUCCEEDED);
    expect(reporter.lines(a.tiId, 'stdout')).toEqual(['out1', 'out2']);
    expect(reporter.lines(a.tiId, 'stderr')).toEqual(['err1', 'err2']);
    const system = reporter.lines(a.tiId, 'system');
    expect(system[0]).toBe(
      `started pid ${reporter.pidOf(a.tiId)}: sh -c 'echo out1; echo err1 >&2; echo out2; echo err2 >&2'`,
    );
    expect(system.at(-1)).toBe('exited with code 0');
    expect(executor.activeCount).toBe(0);
  });

  it("reports Started with the pid of the shim, which leads the task's process group", async () => {
    const { reporter, executor } = setup({ readyShell: false });
    const a = attempt(['sh', '-c', 'ps -o pgid= -p $$']);
    await executor.dispatch(a);
    expect(reporter.startedCalls).toEqual([{ tiId: a.tiId, pid: expect.any(Number) }]);
    expect((await reporter.finishedOf(a.tiId)).outcome).toBe('success');
    expect(Number(reporter.lines(a.tiId, 'stdout')[0])).toBe(reporter.pidOf(a.tiId));
  });

  it('streams the lines of tasks that run a while as they come, each whole, two tasks writing at once', async () => {
    const { reporter, executor } = setup();
    const script = (tag: string) =>
      `printf '${tag}-first '; sleep 0.15; echo ${tag}-line; printf '${tag}-partial'; sleep 0.15; echo ' ${tag}-rest'; sleep 30`;
    const a = attempt(['sh', '-c', script('a')]);
    const b = attempt(['sh', '-c', script('b')]);
    await Promise.all([executor.dispatch(a), executor.dispatch(b)]);
    await waitFor(
      () => reporter.lines(a.tiId, 'stdout').length === 2 && reporter.lines(b.tiId, 'stdout').length === 2,
      3000,
      'both lines of both tasks while they run',
    );
    for (const [t, tag] of [
      [a, 'a'],
      [b, 'b'],
    ] as const)
      expect(reporter.lines(t.tiId, 'stdout')).toEqual([`${tag}-first ${tag}-line`, `${tag}-partial ${tag}-rest`]);
    expect(reporter.finishedCalls).toEqual([]);
    executor.cancel(a.tiId, 'done');
    executor.cancel(b.tiId, 'done');
    await reporter.finishedOf(a.tiId);
    await reporter.finishedOf(b.tiId);
  });

  it('reports a non-zero exit as failed with the exit code', async () => {
    const { reporter, executor } = setup();
    const a = attempt(['sh', '-c', 'exit 3']);
    await executor.dispatch(a);
    expect(await reporter.finishedOf(a.tiId)).toEqual(exitedWith(3));
    expect(reporter.lines(a.tiId, 'system')).toContain('exited with code 3');
  });

  it('joins lines split across chunks, including a split UTF-8 character, and keeps a last line without newline', async () => {
    const { reporter, executor } = setup();
    // \303\251 is "é": its two bytes arrive in separate writes.
    const script =
      "printf 'hel'; sleep 0.1; printf 'lo \\303'; sleep 0.1; printf '\\251\\nwor'; sleep 0.1; printf 'ld'";
    const a = attempt(['sh', '-c', script]);
    await executor.dispatch(a);
    expect((await reporter.finishedOf(a.tiId)).outcome).toBe('success');
    expect(reporter.lines(a.tiId, 'stdout')).toEqual(['hello é', 'world']);
  });

  it('passes attempt.env to the child on top of the inherited environment', async () => {
    const { reporter, executor } = setup();
    const a = attempt(['sh', '-c', 'echo "$LEOFLOW_TEST_VAR|$LEOFLOW_INHERITED"'], {
      env: { LEOFLOW_TEST_VAR: 'hello world' },
    });
    process.env.LEOFLOW_INHERITED = 'from-parent';
    try {
      await executor.dispatch(a);
    } finally {
      delete process.env.LEOFLOW_INHERITED;
    }
    await reporter.finishedOf(a.tiId);
    expect(reporter.lines(a.tiId, 'stdout')).toEqual(['hello world|from-parent']);
  });

  it('runs the command in attempt.cwd', async () => {
    const { reporter, executor } = setup();
    const dir = tempDir();
    const a = attempt(['pwd'], { cwd: dir });
    await executor.dispatch(a);
    await reporter.finishedOf(a.tiId);
    expect(reporter.lines(a.tiId, 'stdout')).toEqual([dir]);
  });

  it('reports spawn_failed for a missing command without calling started', async () => {
    const { reporter, executor } = setup();
    const a = attempt(['nosuchcmd-leoflow', '--flag']);
    await executor.dispatch(a);
    // Reported before dispatch resolved: no waiting needed.
    expect(reporter.finishedCalls.map((c) => c.result)).toEqual([
      {
        exitCode: null,
        signal: null,
        error: 'failed to start "nosuchcmd-leoflow": spawn nosuchcmd-leoflow ENOENT',
        outcome: 'spawn_failed',
      },
    ]);
    expect(reporter.startedCalls).toEqual([]);
    expect(executor.activeCount).toBe(0);
  });

  it('reports spawn_failed for a cwd that does not exist, naming the cwd', async () => {
    const { reporter, executor } = setup();
    const a = attempt(['sh', '-c', 'true'], { cwd: '/nonexistent/leoflow' });
    await executor.dispatch(a);
    const result = reporter.finishedCalls[0]?.result;
    expect(result?.outcome).toBe('spawn_failed');
    expect(result?.error).toBe('failed to start "sh" in /nonexistent/leoflow: no such directory');
    expect(reporter.startedCalls).toEqual([]);
  });
});
