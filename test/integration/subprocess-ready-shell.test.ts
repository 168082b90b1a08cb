import { describe, expect, it } from 'vitest';
import { attempt, cleanUpAfterEach, readyShellPids, setup, tempDir, waitFor } from '../helpers/subprocess-bench.js';
import { SUCCEEDED, cancelledFor, exitedWith } from '../helpers/attempt-outcomes.js';

cleanUpAfterEach();

describe('subprocess executor, from a ready shell', () => {
  /** An executor whose next start comes from its ready shell (one attempt run first to make it). */
  async function primed() {
    const env = setup();
    const first = attempt(['true']);
    await env.executor.dispatch(first);
    await env.reporter.finishedOf(first.tiId);
    expect(env.starts).toEqual(['spawn']);
    await waitFor(() => readyShellPids().length > 0, 2000, 'a ready shell');
    return env;
  }

  it('runs the command with its arguments exactly as given, stdin empty, in the group its shim leads', async () => {
    const { reporter, executor, starts } = await primed();
    const args = ["it's", 'two words', 'a\nnewline', '$HOME `id` $(id) \\ " *', 'é ✓', '', '-x'];
    const script = [
      'console.log(JSON.stringify(process.argv.slice(1))); let n = 0;',
      'process.stdin.on("data", (d) => (n += d.length)).on("end", () => console.log(`stdin ${n}`));',
      'console.log(`group ${require("child_process").execSync("ps -o pgid= -p " + process.pid).toString().trim()}`)',
    ].join(' ');
    const a = attempt([process.execPath, '-e', script, ...args]);
    await executor.dispatch(a);
    expect(await reporter.finishedOf(a.tiId)).toEqual(SUCCEEDED);
    expect(starts).toEqual(['spawn', 'ready-shell']);
    const out = reporter.lines(a.tiId, 'stdout');
    expect(JSON.parse(out[0]!)).toEqual(args);
    expect(out.slice(1).sort()).toEqual([`group ${reporter.pidOf(a.tiId)}`, 'stdin 0']);
    expect(reporter.lines(a.tiId, 'system')[0]).toMatch(new RegExp(`^started pid ${reporter.pidOf(a.tiId)}: `));
  });

  it('passes attempt.env on top of the inherited environment and runs in attempt.cwd', async () => {
    process.env.LEOFLOW_INHERITED = 'from-parent';
    try {
      const { reporter, executor, starts } = await primed();
      const dir = tempDir();
      const a = attempt(['sh', '-c', 'printf "%s|%s|%s\\n" "$LEOFLOW_TEST_VAR" "$LEOFLOW_INHERITED" "$(pwd)"'], {
        env: { LEOFLOW_TEST_VAR: "it's a\nvalue" },
        cwd: dir,
      });
      await executor.dispatch(a);
      await reporter.finishedOf(a.tiId);
      expect(reporter.lines(a.tiId, 'stdout')).toEqual(["it's a", `value|from-parent|${dir}`]);
      expect(starts).toEqual(['spawn', 'ready-shell']);
    } finally {
      delete process.env.LEOFLOW_INHERITED;
    }
  });

  it('reports exit codes and the output of a command that exits at once, and kills by signal as before', async () => {
    const { reporter, executor, starts } = await primed();
    const a = attempt(['sh', '-c', 'echo out; echo err >&2; exit 3']);
    await executor.dispatch(a);
    expect(await reporter.finishedOf(a.tiId)).toEqual(exitedWith(3));
    // Every line, the start's first (stdout and stderr are two pipes: their order is not kept).
    const logged = reporter.logs.filter((l) => l.tiId === a.tiId).map((l) => `${l.stream}: ${l.line}`);
    expect(logged[0]).toBe(`system: started pid ${reporter.pidOf(a.tiId)}: sh -c 'echo out; echo err >&2; exit 3'`);
    expect(logged.slice(1, 3).sort()).toEqual(['stderr: err', 'stdout: out']);
    expect(logged.slice(3)).toEqual(['system: exited with code 3']);
    await waitFor(() => readyShellPids().length > 0, 2000, 'a ready shell');
    const b = attempt(['sleep', '30']);
    await executor.dispatch(b);
    expect(executor.cancel(b.tiId, 'stop it')).toBe(true);
    expect(await reporter.finishedOf(b.tiId)).toEqual(cancelledFor('stop it'));
    expect(starts).toEqual(['spawn', 'ready-shell', 'ready-shell']);
  });

  it('refuses what no process could be given, with the error spawn() would give, and keeps the ready shell', async () => {
    const { reporter, executor, starts } = await primed();
    const missing = attempt(['nosuchcmd-leoflow', '--flag']);
    await executor.dispatch(missing);
    expect(reporter.finishedCalls.find((c) => c.tiId === missing.tiId)?.result).toEqual({
      exitCode: null,
      signal: null,
      error: 'failed to start "nosuchcmd-leoflow": spawn nosuchcmd-leoflow ENOENT',
      outcome: 'spawn_failed',
    });
    const noDir = attempt(['sh', '-c', 'true'], { cwd: '/nonexistent/leoflow' });
    await executor.dispatch(noDir);
    expect(reporter.finishedCalls.find((c) => c.tiId === noDir.tiId)?.result.error).toBe(
      'failed to start "sh" in /nonexistent/leoflow: no such directory',
    );
    const oddName = attempt([process.execPath, '-e', '0'], { env: { 'odd-name': 'yes' } });
    await executor.dispatch(oddName);
    expect(reporter.finishedCalls.find((c) => c.tiId === oddName.tiId)?.result.error).toBe(
      `failed to start ${JSON.stringify(process.execPath)}: environment name "odd-name" is not a shell name ([A-Za-z_][A-Za-z0-9_]*)`,
    );
    const nul = attempt(['sh', '-c', 'echo a\0b']);
    await executor.dispatch(nul);
    expect(reporter.finishedCalls.find((c) => c.tiId === nul.tiId)?.result.outcome).toBe('spawn_failed');
    expect(starts).toEqual(['spawn']);
    // The ready shell is still there for the next one.
    const next = attempt(['true']);
    await executor.dispatch(next);
    await reporter.finishedOf(next.tiId);
    expect(starts).toEqual(['spawn', 'ready-shell']);
  });

  it('spawns when the ready shell died meanwhile, and makes another', async () => {
    const { reporter, executor, starts } = await primed();
    for (const pid of readyShellPids()) process.kill(pid, 'SIGKILL');
    await waitFor(() => readyShellPids().length === 0, 2000, 'the ready shell gone');
    const a = attempt(['sh', '-c', 'echo hi']);
    await executor.dispatch(a);
    expect((await reporter.finishedOf(a.tiId)).outcome).toBe('success');
    expect(reporter.lines(a.tiId, 'stdout')).toEqual(['hi']);
    await waitFor(() => readyShellPids().length > 0, 2000, 'a new ready shell');
    const b = attempt(['true']);
    await executor.dispatch(b);
    expect((await reporter.finishedOf(b.tiId)).outcome).toBe('success');
    expect(starts).toEqual(['spawn', 'spawn', 'ready-shell']);
  });

  it('serves only a lone start: with another attempt running, an attempt is spawned', async () => {
    const { reporter, executor, starts } = await primed();
    const long = attempt(['sleep', '30']);
    await executor.dispatch(long);
    // A shell is made ready again while the lone attempt runs...
    await waitFor(() => readyShellPids().length > 0, 2000, 'a ready shell');
    // ...but the next start is not a lone one.
    const other = attempt(['sh', '-c', 'echo other']);
    await executor.dispatch(other);
    await reporter.finishedOf(other.tiId);
    expect(reporter.lines(other.tiId, 'stdout')).toEqual(['other']);
    expect(starts).toEqual(['spawn', 'ready-shell', 'spawn']);
    executor.cancel(long.tiId, 'done');
    expect((await reporter.finishedOf(long.tiId)).outcome).toBe('cancelled');
  });

  it('leaves no shell behind at shutdown, and keeps none when switched off', async () => {
    const { executor } = await primed();
    await executor.shutdown(0);
    await waitFor(() => readyShellPids().length === 0, 2000, 'the ready shell gone');
    const off = setup({ readyShell: false });
    for (let i = 0; i < 2; i++) {
      const a = attempt(['true']);
      await off.executor.dispatch(a);
      await off.reporter.finishedOf(a.tiId);
    }
    await new Promise((r) => setTimeout(r, 50));
    expect(off.starts).toEqual(['spawn', 'spawn']);
    expect(readyShellPids()).toEqual([]);
  });
});
