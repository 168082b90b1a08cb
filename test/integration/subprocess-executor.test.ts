import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, realpathSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { Attempt, AttemptReporter, AttemptResult, Executor, LogStream } from '../../src/executors/executor.js';
import { LineSplitter } from '../../src/executors/process/line-splitter.js';
import type { StartedHow } from '../../src/executors/process/shim-process.js';
import { SHUTDOWN_ERROR, createSubprocessExecutor } from '../../src/executors/subprocess/subprocess-executor.js';

/** Records every call; `started` and `heartbeat` answer as configured. */
class FakeReporter implements AttemptReporter {
  startedAnswer: boolean | Error = true;
  /** Ti ids the store no longer considers current; an Error makes heartbeat reject. */
  heartbeatDrops: Set<string> | Error = new Set();
  readonly startedCalls: { tiId: string; pid: number | null }[] = [];
  readonly logs: { tiId: string; stream: LogStream; line: string }[] = [];
  readonly heartbeats: string[][] = [];
  readonly finishedCalls: { tiId: string; result: AttemptResult; at: number }[] = [];

  async started(attempt: Attempt, info: { pid: number | null }): Promise<boolean> {
    this.startedCalls.push({ tiId: attempt.tiId, pid: info.pid });
    if (info.pid !== null) spawnedPids.add(info.pid);
    if (this.startedAnswer instanceof Error) throw this.startedAnswer;
    return this.startedAnswer;
  }

  log(attempt: Attempt, stream: LogStream, line: string): void {
    this.logs.push({ tiId: attempt.tiId, stream, line });
  }

  async heartbeat(attempts: Attempt[]): Promise<Set<string>> {
    this.heartbeats.push(attempts.map((a) => a.tiId).sort());
    const drops = this.heartbeatDrops;
    if (drops instanceof Error) throw drops;
    return new Set(attempts.map((a) => a.tiId).filter((id) => !drops.has(id)));
  }

  async finished(attempt: Attempt, result: AttemptResult): Promise<void> {
    this.finishedCalls.push({ tiId: attempt.tiId, result, at: Date.now() });
  }

  logsStored = { stdout: 0, stderr: 0 };
  async logsSoFar(): Promise<{ stdout: number; stderr: number }> {
    return this.logsStored;
  }

  lines(tiId: string, stream: LogStream): string[] {
    return this.logs.filter((l) => l.tiId === tiId && l.stream === stream).map((l) => l.line);
  }

  pidOf(tiId: string): number {
    const pid = this.startedCalls.find((c) => c.tiId === tiId)?.pid;
    if (typeof pid !== 'number') throw new Error(`no pid reported for ${tiId}`);
    return pid;
  }

  async finishedOf(tiId: string, timeoutMs = 4000): Promise<AttemptResult> {
    await waitFor(() => this.finishedCalls.some((c) => c.tiId === tiId), timeoutMs, `finished(${tiId})`);
    const calls = this.finishedCalls.filter((c) => c.tiId === tiId);
    expect(calls).toHaveLength(1);
    return calls[0]!.result;
  }
}

const spawnedPids = new Set<number>();
const executors: Executor[] = [];
const tempDirs: string[] = [];

afterEach(async () => {
  for (const pid of spawnedPids) {
    for (const target of [-pid, pid]) {
      try {
        process.kill(target, 'SIGKILL');
      } catch {
        // already gone: the point of most tests
      }
    }
  }
  spawnedPids.clear();
  await Promise.all(executors.splice(0).map((e) => e.shutdown(0)));
  for (const dir of tempDirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

let seq = 0;
function attempt(command: string[], over: Partial<Attempt> = {}): Attempt {
  const n = ++seq;
  return {
    tiId: `ti-${n}`,
    runId: 'run-1',
    dagId: 'dag',
    taskId: `task-${n}`,
    tryNumber: 1,
    maxTries: 1,
    attemptToken: `token-${n}`,
    dispatchKey: `dag-run-1-task-${n}-1`,
    command,
    env: {},
    cwd: null,
    timeoutMs: null,
    ...over,
  };
}

/** Whether `setup` starts shims through the spawn helper unless told (the main suite runs both ways). */
let helperByDefault = false;

function setup(
  opts: {
    killGraceMs?: number;
    heartbeatIntervalMs?: number;
    outputDrainMs?: number;
    readyShell?: boolean;
    spawnHelper?: boolean;
  } = {},
) {
  const starts: StartedHow[] = [];
  const reporter = new FakeReporter();
  const logLines: string[] = [];
  const logger = pino(
    { level: 'warn' },
    new Writable({
      write(chunk: Buffer, _enc, done) {
        logLines.push(chunk.toString());
        done();
      },
    }),
  );
  const attemptsDir = mkdtempSync(join(tmpdir(), 'leoflow-attempts-'));
  tempDirs.push(attemptsDir);
  const executor = createSubprocessExecutor({
    reporter,
    logger,
    attemptsDir,
    killGraceMs: opts.killGraceMs ?? 200,
    heartbeatIntervalMs: opts.heartbeatIntervalMs ?? 50,
    ...(opts.readyShell === undefined ? {} : { readyShell: opts.readyShell }),
    spawnHelper: opts.spawnHelper ?? helperByDefault,
    onStart: (how) => starts.push(how),
  });
  executors.push(executor);
  return { reporter, executor, logLines, starts, attemptsDir };
}

async function waitFor(cond: () => boolean, timeoutMs: number, what: string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/**
 * Whether the process still runs. A zombie counts as dead: grandchildren are reparented to PID 1,
 * which in some containers never reaps them, so `kill(pid, 0)` would still succeed there.
 */
function isRunning(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ESRCH') return false;
    throw err;
  }
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2)[0] !== 'Z';
  } catch {
    return false;
  }
}

/**
 * The shim is dead when its end is reported: reaped already when it is our child; a zombie for a
 * moment when the spawn helper is its parent (told to reap it as its end is seen).
 */
function expectDeadAtItsEnd(pid: number): void {
  if (helperByDefault) expect(isRunning(pid)).toBe(false);
  else expect(() => process.kill(pid, 0)).toThrow(expect.objectContaining({ code: 'ESRCH' }));
}

async function expectGone(pid: number): Promise<void> {
  await waitFor(() => !isRunning(pid), 2000, `pid ${pid} to be gone`);
}

function tempDir(): string {
  const dir = realpathSync(mkdtempSync(join(tmpdir(), 'leoflow-subprocess-')));
  tempDirs.push(dir);
  return dir;
}

describe.each([{ helper: false }, { helper: true }])('subprocess executor (spawn helper: $helper)', ({ helper }) => {
  beforeEach(() => {
    helperByDefault = helper;
    return () => {
      helperByDefault = false;
    };
  });

  it('captures stdout and stderr lines in order and reports success on exit 0', async () => {
    const { reporter, executor } = setup();
    const a = attempt(['sh', '-c', 'echo out1; echo err1 >&2; echo out2; echo err2 >&2']);
    await executor.dispatch(a);
    expect(reporter.startedCalls).toEqual([{ tiId: a.tiId, pid: expect.any(Number) }]);
    expect(await reporter.finishedOf(a.tiId)).toEqual({ exitCode: 0, signal: null, error: null, outcome: 'success' });
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
    expect(await reporter.finishedOf(a.tiId)).toEqual({
      exitCode: 3,
      signal: null,
      error: 'exit code 3',
      outcome: 'failed',
    });
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
    expect(result).toEqual({
      exitCode: null,
      signal: 'SIGKILL',
      error: 'timed out after 300 ms',
      outcome: 'timed_out',
    });
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
    expect(result).toEqual({
      exitCode: null,
      signal: 'SIGKILL',
      error: 'timed out after 300 ms',
      outcome: 'timed_out',
    });
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
    const { reporter, executor } = setup();
    const a = attempt(['sh', '-c', 'sleep 30 & echo $!']);
    await executor.dispatch(a);
    const dispatchedAt = Date.now();
    const result = await reporter.finishedOf(a.tiId);
    expect(result.outcome).toBe('success');
    expect(reporter.finishedCalls[0]!.at - dispatchedAt).toBeLessThan(1500);
    const grandchild = Number(reporter.lines(a.tiId, 'stdout')[0]);
    spawnedPids.add(grandchild);
    await expectGone(grandchild);
  });

  it('a process that left the group (setsid) does not hold up the end: output is a file, not a pipe', async () => {
    const { reporter, executor } = setup();
    const a = attempt(['sh', '-c', 'setsid sleep 30 & echo $!; sleep 0.2']);
    await executor.dispatch(a);
    const dispatchedAt = Date.now();
    const result = await reporter.finishedOf(a.tiId, 2000);
    spawnedPids.add(Number(reporter.lines(a.tiId, 'stdout')[0]));
    expect(result.outcome).toBe('success');
    expect(reporter.finishedCalls[0]!.at - dispatchedAt).toBeLessThan(1000);
    expect(executor.activeCount).toBe(0);
  });

  it('cancel stops a live attempt with the reason as error; unknown or ended ti ids return false', async () => {
    const { reporter, executor } = setup();
    const a = attempt(['sleep', '30']);
    await executor.dispatch(a);
    expect(executor.activeCount).toBe(1);
    expect(executor.cancel('ti-unknown', 'nope')).toBe(false);
    expect(executor.cancel(a.tiId, 'cancelled by user')).toBe(true);
    expect(await reporter.finishedOf(a.tiId)).toEqual({
      exitCode: null,
      signal: 'SIGTERM',
      error: 'cancelled by user',
      outcome: 'cancelled',
    });
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

  it('heartbeats live attempts and stops one the store no longer considers current', async () => {
    const { reporter, executor } = setup({ heartbeatIntervalMs: 50 });
    const keep = attempt(['sleep', '30']);
    const drop = attempt(['sleep', '30']);
    await executor.dispatch(keep);
    await executor.dispatch(drop);
    const both = [keep.tiId, drop.tiId].sort();
    await waitFor(() => reporter.heartbeats.some((h) => h.join() === both.join()), 2000, 'a heartbeat of both');
    expect(reporter.finishedCalls).toEqual([]);

    reporter.heartbeatDrops = new Set([drop.tiId]);
    expect(await reporter.finishedOf(drop.tiId)).toMatchObject({ outcome: 'superseded', signal: 'SIGTERM' });
    await expectGone(reporter.pidOf(drop.tiId));
    const seen = reporter.heartbeats.length;
    await waitFor(() => reporter.heartbeats.length > seen, 2000, 'a later heartbeat');
    expect(reporter.heartbeats.at(-1)).toEqual([keep.tiId]);
    expect(isRunning(reporter.pidOf(keep.tiId))).toBe(true);
  });

  it('a rejected heartbeat kills nothing and is retried', async () => {
    const { reporter, executor, logLines } = setup({ heartbeatIntervalMs: 50 });
    reporter.heartbeatDrops = new Error('connection terminated');
    const a = attempt(['sleep', '30']);
    await executor.dispatch(a);
    await waitFor(() => reporter.heartbeats.length >= 3, 2000, 'three heartbeats');
    expect(isRunning(reporter.pidOf(a.tiId))).toBe(true);
    expect(reporter.finishedCalls).toEqual([]);
    expect(executor.activeCount).toBe(1);
    expect(logLines.some((l) => l.includes('heartbeat failed'))).toBe(true);
  });

  it('a duplicate dispatch of a live ti spawns once', async () => {
    const { reporter, executor } = setup();
    const marker = join(tempDir(), 'spawns');
    const a = attempt(['sh', '-c', `echo x >> '${marker}'; sleep 30`]);
    await Promise.all([executor.dispatch(a), executor.dispatch(a)]);
    await executor.dispatch({ ...a });
    await waitFor(() => existsSync(marker) && readFileSync(marker, 'utf8').length > 0, 2000, 'the marker');
    await new Promise((r) => setTimeout(r, 100));
    expect(readFileSync(marker, 'utf8')).toBe('x\n');
    expect(reporter.startedCalls).toHaveLength(1);
    expect(executor.activeCount).toBe(1);
  });

  it('shutdown lets a short task finish, stops a long one as failed, then refuses work', async () => {
    const { reporter, executor } = setup({ killGraceMs: 200 });
    const short = attempt(['sh', '-c', 'sleep 0.3; echo done']);
    const long = attempt(['sleep', '30']);
    await executor.dispatch(short);
    await executor.dispatch(long);
    const startedAt = Date.now();
    await executor.shutdown(1000);
    const took = Date.now() - startedAt;
    expect(took).toBeGreaterThanOrEqual(1000 - 20);
    expect(took).toBeLessThan(2500);
    // Both reports resolved before shutdown did.
    expect(reporter.finishedCalls.find((c) => c.tiId === short.tiId)?.result).toEqual({
      exitCode: 0,
      signal: null,
      error: null,
      outcome: 'success',
    });
    expect(reporter.lines(short.tiId, 'stdout')).toEqual(['done']);
    expect(reporter.finishedCalls.find((c) => c.tiId === long.tiId)?.result).toEqual({
      exitCode: null,
      signal: 'SIGTERM',
      error: SHUTDOWN_ERROR,
      outcome: 'failed',
    });
    expect(executor.activeCount).toBe(0);
    await expect(executor.dispatch(attempt(['true']))).rejects.toThrow(/shutting down/);
  });

  it('shutdown resolves as soon as live attempts end by themselves', async () => {
    const { reporter, executor } = setup();
    const a = attempt(['sh', '-c', 'sleep 0.2']);
    await executor.dispatch(a);
    const startedAt = Date.now();
    await executor.shutdown(5000);
    expect(Date.now() - startedAt).toBeLessThan(1500);
    expect(reporter.finishedCalls.map((c) => c.result.outcome)).toEqual(['success']);
  });

  it('survives a reporter that throws: the child still runs, ends and is reaped', async () => {
    const { reporter, executor, logLines } = setup();
    reporter.startedAnswer = new Error('db down');
    reporter.log = () => {
      throw new Error('log buffer full');
    };
    const finished = reporter.finished.bind(reporter);
    reporter.finished = async (att, result) => {
      await finished(att, result);
      throw new Error('db down');
    };
    const a = attempt(['sh', '-c', 'echo hi; exit 4']);
    await executor.dispatch(a);
    expect((await reporter.finishedOf(a.tiId)).outcome).toBe('failed');
    await executor.shutdown(1000);
    await expectGone(reporter.pidOf(a.tiId));
    const errors = logLines.map((l) => JSON.parse(l) as { msg: string; tiId?: string; tryNumber?: number });
    expect(errors.some((e) => e.msg.startsWith('reporting started failed') && e.tiId === a.tiId)).toBe(true);
    expect(errors.some((e) => e.msg === 'reporting finished failed' && e.tryNumber === 1)).toBe(true);
    expect(errors.some((e) => e.msg === 'reporting a log line failed')).toBe(true);
  });
});

/** Children of this process that are ready shells (`/bin/sh -s`). */
function readyShellPids(): number[] {
  const out = execFileSync('ps', ['--ppid', String(process.pid), '-o', 'pid=,args='], { encoding: 'utf8' });
  return out
    .split('\n')
    .filter((l) => /\/bin\/sh -s$/.test(l.trim()))
    .map((l) => Number(l.trim().split(/\s+/)[0]));
}

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
    const script =
      'console.log(JSON.stringify(process.argv.slice(1))); let n = 0; process.stdin.on("data", (d) => (n += d.length)).on("end", () => console.log(`stdin ${n}`)); console.log(`group ${require("child_process").execSync("ps -o pgid= -p " + process.pid).toString().trim()}`)';
    const a = attempt([process.execPath, '-e', script, ...args]);
    await executor.dispatch(a);
    expect(await reporter.finishedOf(a.tiId)).toEqual({ exitCode: 0, signal: null, error: null, outcome: 'success' });
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
    expect(await reporter.finishedOf(a.tiId)).toEqual({
      exitCode: 3,
      signal: null,
      error: 'exit code 3',
      outcome: 'failed',
    });
    // Every line, the start's first (stdout and stderr are two pipes: their order is not kept).
    const logged = reporter.logs.filter((l) => l.tiId === a.tiId).map((l) => `${l.stream}: ${l.line}`);
    expect(logged[0]).toBe(`system: started pid ${reporter.pidOf(a.tiId)}: sh -c 'echo out; echo err >&2; exit 3'`);
    expect(logged.slice(1, 3).sort()).toEqual(['stderr: err', 'stdout: out']);
    expect(logged.slice(3)).toEqual(['system: exited with code 3']);
    await waitFor(() => readyShellPids().length > 0, 2000, 'a ready shell');
    const b = attempt(['sleep', '30']);
    await executor.dispatch(b);
    expect(executor.cancel(b.tiId, 'stop it')).toBe(true);
    expect(await reporter.finishedOf(b.tiId)).toEqual({
      exitCode: null,
      signal: 'SIGTERM',
      error: 'stop it',
      outcome: 'cancelled',
    });
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

describe('LineSplitter', () => {
  it('splits on newlines across chunks and keeps a trailing partial line for end()', () => {
    const s = new LineSplitter();
    expect(s.push(Buffer.from('a\nb'))).toEqual(['a']);
    expect(s.push(Buffer.from('c\r\n\nd'))).toEqual(['bc', '']);
    expect(s.end()).toEqual(['d']);
    expect(s.end()).toEqual([]);
  });

  it('reassembles a multi-byte character split across chunks', () => {
    const bytes = Buffer.from('€x\n'); // € is three bytes
    const s = new LineSplitter();
    expect(s.push(bytes.subarray(0, 1))).toEqual([]);
    expect(s.push(bytes.subarray(1, 2))).toEqual([]);
    expect(s.push(bytes.subarray(2))).toEqual(['€x']);
  });

  it('caps a line, without cutting a character, and counts what it dropped', () => {
    const s = new LineSplitter(8);
    // "abcdef€" is 9 bytes: the cap falls inside "€", which is dropped whole.
    expect(s.push(Buffer.from('abcdef€'))).toEqual([]);
    expect(s.push(Buffer.from('ghi\nok\n'))).toEqual(['abcdef… [line truncated: 6 more bytes]', 'ok']);
  });
});
