import { expect, it } from 'vitest';
import {
  attempt,
  cleanUpAfterEach,
  expectDeadAtItsEnd,
  expectGone,
  isRunning,
  describeEachSpawnWay,
  setup,
  spawnedPids,
  waitFor,
} from '../helpers/subprocess-bench.js';
import { cancelledFor, killedAtTimeout } from '../helpers/attempt-outcomes.js';

cleanUpAfterEach();

/**
 * Runs `command` on a fresh executor to its end (waiting `finishMs` at most, if given): its result,
 * and how long after the dispatch it ended.
 */
async function timedRun(command: string[], finishMs?: number) {
  const { reporter, executor } = setup();
  const a = attempt(command);
  await executor.dispatch(a);
  const dispatchedAt = Date.now();
  const result = await reporter.finishedOf(a.tiId, finishMs);
  return { reporter, executor, a, result, endedAfterMs: reporter.finishedCalls[0]!.at - dispatchedAt };
}

describeEachSpawnWay('subprocess executor, stopping tasks', () => {
  it('kills the process group at once when started says the attempt was superseded', async () => {
    const { reporter, executor } = setup();
    reporter.startedAnswer = false;
    const a = attempt(['sleep', '30']);
    await executor.dispatch(a);
    const pid = reporter.pidOf(a.tiId);
    const result = await reporter.finishedOf(a.tiId, 1000);
    expect(result).toMatchObject({ outcome: 'superseded', signal: 'SIGKILL', exitCode: null });
    expectDeadAtItsEnd(pid);
  });

  it('on timeout sends SIGTERM, then SIGKILL after the grace when the task ignores TERM', async () => {
    const { reporter, executor } = setup({ killGraceMs: 200 });
    const a = attempt(['sh', '-c', 'trap "" TERM; sleep 30'], { timeoutMs: 300 });
    await executor.dispatch(a);
    const dispatchedAt = Date.now();
    const pid = reporter.pidOf(a.tiId);
    const result = await reporter.finishedOf(a.tiId);
    expect(result).toEqual(killedAtTimeout(300));
    expect(reporter.finishedCalls[0]!.at - dispatchedAt).toBeGreaterThanOrEqual(300 + 200 - 20);
    const system = reporter.lines(a.tiId, 'system');
    expect(system).toContain(`timed out after 300 ms: sending SIGTERM to process group ${pid}`);
    expect(system).toContain('still running 200 ms after SIGTERM: sending SIGKILL');
    expectDeadAtItsEnd(pid);
  });

  it("uses the attempt's own kill grace over the executor's", async () => {
    const { reporter, executor } = setup({ killGraceMs: 60_000 });
    const a = attempt(['sh', '-c', 'trap "" TERM; sleep 30'], { timeoutMs: 300, killGraceMs: 200 });
    await executor.dispatch(a);
    const dispatchedAt = Date.now();
    const pid = reporter.pidOf(a.tiId);
    const result = await reporter.finishedOf(a.tiId, 4000);
    expect(result).toEqual(killedAtTimeout(300));
    expect(reporter.finishedCalls[0]!.at - dispatchedAt).toBeGreaterThanOrEqual(300 + 200 - 20);
    expect(reporter.lines(a.tiId, 'system')).toContain('still running 200 ms after SIGTERM: sending SIGKILL');
    expectDeadAtItsEnd(pid);
  });

  it('on timeout kills grandchildren with the group', async () => {
    const { reporter, executor } = setup();
    const a = attempt(['sh', '-c', 'sleep 30 & echo $!; wait'], { timeoutMs: 300 });
    await executor.dispatch(a);
    await waitFor(() => reporter.lines(a.tiId, 'stdout').length > 0, 2000, 'grandchild pid');
    const grandchild = Number(reporter.lines(a.tiId, 'stdout')[0]);
    spawnedPids.add(grandchild);
    expect(isRunning(grandchild)).toBe(true);
    expect((await reporter.finishedOf(a.tiId)).outcome).toBe('timed_out');
    await expectGone(grandchild);
  });

  it('kills what is left of the group once the task exits', async () => {
    const { reporter, a, result, endedAfterMs } = await timedRun(['sh', '-c', 'sleep 30 & echo $!']);
    expect(result.outcome).toBe('success');
    expect(endedAfterMs).toBeLessThan(1500);
    const grandchild = Number(reporter.lines(a.tiId, 'stdout')[0]);
    spawnedPids.add(grandchild);
    await expectGone(grandchild);
  });

  it('a process that left the group (setsid) does not hold up the end: output is a file, not a pipe', async () => {
    const { reporter, executor, a, result, endedAfterMs } = await timedRun(
      ['sh', '-c', 'setsid sleep 30 & echo $!; sleep 0.2'],
      2000,
    );
    spawnedPids.add(Number(reporter.lines(a.tiId, 'stdout')[0]));
    expect(result.outcome).toBe('success');
    expect(endedAfterMs).toBeLessThan(1000);
    expect(executor.activeCount).toBe(0);
  });

  it('cancel stops a live attempt with the reason as error; unknown or ended ti ids return false', async () => {
    const { reporter, executor } = setup();
    const a = attempt(['sleep', '30']);
    await executor.dispatch(a);
    expect(executor.activeCount).toBe(1);
    expect(executor.cancel('ti-unknown', 'nope')).toBe(false);
    expect(executor.cancel(a.tiId, 'cancelled by user')).toBe(true);
    expect(await reporter.finishedOf(a.tiId)).toEqual(cancelledFor('cancelled by user'));
    expect(executor.cancel(a.tiId, 'again')).toBe(false);
    await expectGone(reporter.pidOf(a.tiId));
  });

  it("a cancel in the instant after the start still reaches the task as SIGTERM, not only the grace's SIGKILL", async () => {
    // Sent before the task's exec, the SIGTERM would reach its shim alone (shim.ts): the task
    // would run on to the SIGKILL. Many starts, so the instant is hit.
    const { reporter, executor } = setup({ killGraceMs: 2000 });
    for (let i = 0; i < 20; i++) {
      const a = attempt(['sleep', '30']);
      await executor.dispatch(a);
      executor.cancel(a.tiId, 'at once');
      expect(await reporter.finishedOf(a.tiId, 5000), `start ${i + 1}`).toMatchObject({
        signal: 'SIGTERM',
        outcome: 'cancelled',
      });
    }
  });
});
