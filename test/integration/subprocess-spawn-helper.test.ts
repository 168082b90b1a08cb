import { execFileSync } from 'node:child_process';
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  attempt,
  cleanUpAfterEach,
  expectGone,
  readyShellPids,
  setup,
  spawnedPids,
  tempDir,
  waitFor,
} from '../helpers/subprocess-bench.js';

cleanUpAfterEach();

describe('subprocess executor, through the spawn helper', () => {
  /** The executor's spawn helper (a `/bin/sh -s` child of this process; no ready shell here). */
  function helperPid(): number {
    const [pid, ...more] = readyShellPids();
    expect(more).toEqual([]);
    return pid!;
  }

  function parentOf(pid: number): number {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
  }

  it('starts each shim from the helper, which is its parent and reaps it once it has ended', async () => {
    const { reporter, executor, starts } = setup({ readyShell: false, spawnHelper: true });
    const long = attempt(['sleep', '30']);
    await executor.dispatch(long);
    const helper = helperPid();
    expect(parentOf(reporter.pidOf(long.tiId))).toBe(helper);
    const quick = Array.from({ length: 20 }, (_, i) => attempt(['sh', '-c', `echo ${i}; exit ${i % 3}`]));
    await Promise.all(quick.map((a) => executor.dispatch(a)));
    for (const [i, a] of quick.entries()) {
      expect(await reporter.finishedOf(a.tiId)).toMatchObject({
        exitCode: i % 3,
        outcome: i % 3 === 0 ? 'success' : 'failed',
      });
      expect(reporter.lines(a.tiId, 'stdout')).toEqual([String(i)]);
    }
    expect(starts).toEqual(Array(21).fill('spawn-helper'));
    // Each ended shim is reaped by the helper: none is left a zombie (or running) under it.
    const children = () =>
      execFileSync('ps', ['--ppid', String(helper), '-o', 'pid='], { encoding: 'utf8' })
        .split('\n')
        .map(Number)
        .filter((p) => p > 0);
    await waitFor(() => children().length === 1, 2000, 'the ended shims reaped');
    expect(children()).toEqual([reporter.pidOf(long.tiId)]);
    executor.cancel(long.tiId, 'done');
    expect(await reporter.finishedOf(long.tiId)).toMatchObject({ signal: 'SIGTERM', outcome: 'cancelled' });
  });

  it('passes an environment larger than a pipe holds', async () => {
    const { reporter, executor, starts } = setup({ readyShell: false, spawnHelper: true });
    const big = 'x'.repeat(100_000); // over a pipe's 64 KiB, under one string's 128 KiB limit at exec
    const a = attempt(['sh', '-c', 'printf "%s\\n" "${#LEOFLOW_BIG}"'], { env: { LEOFLOW_BIG: big } });
    await executor.dispatch(a);
    expect((await reporter.finishedOf(a.tiId)).outcome).toBe('success');
    expect(reporter.lines(a.tiId, 'stdout')).toEqual(['100000']);
    expect(starts).toEqual(['spawn-helper']);
  });

  it("passes the task's words exactly, even lines that look like the end of the shim's here-document", async () => {
    const { reporter, executor, starts } = setup({ readyShell: false, spawnHelper: true });
    const ends = Array.from({ length: 40 }, (_, i) => `LEOFLOW_SHIM_${i}`).join('\n');
    const args = [`a\n${ends}\nb`, "it's", '$(id) `id` \\'];
    const a = attempt(['sh', '-c', 'printf "%s|" "$@" "$LEOFLOW_TEST_VAR"', 'sh', ...args], {
      env: { LEOFLOW_TEST_VAR: `${ends}\n'` },
    });
    await executor.dispatch(a);
    expect((await reporter.finishedOf(a.tiId)).outcome).toBe('success');
    expect(reporter.lines(a.tiId, 'stdout').join('\n')).toBe(`${[...args, `${ends}\n'`].join('|')}|`);
    expect(starts).toEqual(['spawn-helper']);
  });

  it('sees the end of a shim killed alone, which says nothing, and kills what is left of its group', async () => {
    const { reporter, executor, starts } = setup({ readyShell: false, spawnHelper: true });
    const a = attempt(['sh', '-c', 'echo $$; sleep 30']);
    await executor.dispatch(a);
    await waitFor(() => reporter.lines(a.tiId, 'stdout').length === 1, 2000, 'the task to start');
    const task = Number(reporter.lines(a.tiId, 'stdout')[0]);
    spawnedPids.add(task);
    process.kill(reporter.pidOf(a.tiId), 'SIGKILL');
    expect(await reporter.finishedOf(a.tiId, 4000)).toEqual({
      exitCode: null,
      signal: 'SIGKILL',
      error: 'killed by SIGKILL',
      outcome: 'failed',
    });
    expect(reporter.lines(a.tiId, 'system')).toContain(
      "the task's supervisor was killed (no exit status): counted as killed by SIGKILL",
    );
    await expectGone(task);
    expect(starts).toEqual(['spawn-helper']);
  });

  it('a helper killed meanwhile is replaced at the next start; the shims it started run on and end as before', async () => {
    const { reporter, executor, starts } = setup({ readyShell: false, spawnHelper: true });
    const running = attempt(['sh', '-c', 'sleep 0.5; echo still here']);
    await executor.dispatch(running);
    const first = helperPid();
    process.kill(first, 'SIGKILL');
    await waitFor(() => readyShellPids().length === 0, 2000, 'the helper gone');
    // Its exit may not be known here yet: the start written to it is given up and spawned instead.
    const next = attempt(['sh', '-c', 'echo next']);
    await executor.dispatch(next);
    expect((await reporter.finishedOf(next.tiId)).outcome).toBe('success');
    expect(reporter.lines(next.tiId, 'stdout')).toEqual(['next']);
    const third = attempt(['sh', '-c', 'echo third']);
    await executor.dispatch(third);
    expect((await reporter.finishedOf(third.tiId)).outcome).toBe('success');
    expect(helperPid()).not.toBe(first);
    expect(await reporter.finishedOf(running.tiId)).toEqual({
      exitCode: 0,
      signal: null,
      error: null,
      outcome: 'success',
    });
    expect(reporter.lines(running.tiId, 'stdout')).toEqual(['still here']);
    expect(starts[0]).toBe('spawn-helper');
    expect(['spawn-helper', 'spawn']).toContain(starts[1]);
    expect(starts[2]).toBe('spawn-helper');
  });

  it("removes each attempt's folder once its end is recorded, also one holding a file of the task's", async () => {
    const { reporter, executor, attemptsDir } = setup({ readyShell: false, spawnHelper: true });
    const plain = attempt(['true']);
    const extra = attempt(['sh', '-c', 'echo x > "$LEOFLOW_ATTEMPT_DIR/mine"']);
    await Promise.all([executor.dispatch(plain), executor.dispatch(extra)]);
    await reporter.finishedOf(plain.tiId);
    expect((await reporter.finishedOf(extra.tiId)).outcome).toBe('success');
    const left = () => readdirSync(attemptsDir).filter((n) => n !== 'owner.json');
    await waitFor(() => left().length === 0, 2000, 'the folders removed');
  });

  it('without `setsid` on the PATH, shims are spawned as before', async () => {
    const saved = process.env.PATH;
    process.env.PATH = tempDir();
    try {
      const { reporter, executor, starts } = setup({ readyShell: false, spawnHelper: true });
      const a = attempt(['/bin/sh', '-c', 'echo spawned']);
      await executor.dispatch(a);
      expect((await reporter.finishedOf(a.tiId)).outcome).toBe('success');
      expect(reporter.lines(a.tiId, 'stdout')).toEqual(['spawned']);
      expect(starts).toEqual(['spawn']);
    } finally {
      process.env.PATH = saved;
    }
  });
});
