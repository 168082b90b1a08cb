import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, realpathSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { afterEach, beforeEach, describe, expect } from 'vitest';
import type { Attempt, AttemptReporter, AttemptResult, Executor, LogStream } from '../../src/executors/executor.js';
import type { StartedHow } from '../../src/executors/process/shim-process.js';
import { createSubprocessExecutor } from '../../src/executors/subprocess/subprocess-executor.js';

/** The subprocess executor's test bench: a recording reporter, attempts, and process checks. */
/** Records every call; `started` and `heartbeat` answer as configured. */
export class FakeReporter implements AttemptReporter {
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

export const spawnedPids = new Set<number>();
const executors: Executor[] = [];
const tempDirs: string[] = [];

/** Kills every process a test started, shuts its executors down and removes its folders, after each test. */
export function cleanUpAfterEach(): void {
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
}

let seq = 0;
export function attempt(command: string[], over: Partial<Attempt> = {}): Attempt {
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

/** A suite run twice: shims spawned by this process, then through the spawn helper. */
export function describeEachSpawnWay(title: string, body: () => void): void {
  describe.each([{ helper: false }, { helper: true }])(`${title} (spawn helper: $helper)`, ({ helper }) => {
    beforeEach(() => {
      helperByDefault = helper;
      return () => {
        helperByDefault = false;
      };
    });
    body();
  });
}

export function setup(
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

export async function waitFor(cond: () => boolean, timeoutMs: number, what: string): Promise<void> {
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
export function isRunning(pid: number): boolean {
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
export function expectDeadAtItsEnd(pid: number): void {
  if (helperByDefault) expect(isRunning(pid)).toBe(false);
  else expect(() => process.kill(pid, 0)).toThrow(expect.objectContaining({ code: 'ESRCH' }));
}

export async function expectGone(pid: number): Promise<void> {
  await waitFor(() => !isRunning(pid), 2000, `pid ${pid} to be gone`);
}

export function tempDir(): string {
  const dir = realpathSync(mkdtempSync(join(tmpdir(), 'leoflow-subprocess-')));
  tempDirs.push(dir);
  return dir;
}

/** Children of this process that are ready shells (`/bin/sh -s`). */
export function readyShellPids(): number[] {
  const out = execFileSync('ps', ['--ppid', String(process.pid), '-o', 'pid=,args='], { encoding: 'utf8' });
  return out
    .split('\n')
    .filter((l) => /\/bin\/sh -s$/.test(l.trim()))
    .map((l) => Number(l.trim().split(/\s+/)[0]));
}
