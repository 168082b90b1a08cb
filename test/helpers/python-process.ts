import { spawn, type ChildProcess } from 'node:child_process';
import { cp } from 'node:fs/promises';
import path from 'node:path';
import { ROOT, runCommand } from './leoflow-process.js';

/**
 * The programs of examples/python as child processes, for the python test project: the gRPC
 * stubs buf generated (examples/python/gen) copied into a folder, then each program started with them on
 * PYTHONPATH, tracked until it exits, and SIGKILLed at its time limit at the latest. Needs
 * Debian's python3-grpcio, python3-grpc-tools and protobuf-compiler.
 */

export const PY = '/usr/bin/python3';
export const PY_DIR = path.join(ROOT, 'examples/python');

export interface PythonProcess {
  child: ChildProcess;
  /** What it printed so far. */
  stdout: string;
  stderr: string;
  /** Resolves with the exit code, or -1 when a signal ended it. */
  exited: Promise<number | null>;
}

const live = new Set<ChildProcess>();
process.on('exit', () => {
  for (const c of live) c.kill('SIGKILL');
});

/**
 * Puts the stubs (examples/python/gen, committed and checked current by generated-code.test.ts)
 * into `dir` and checks that they import; throws with the output if not.
 */
export async function generateStubs(dir: string): Promise<void> {
  await cp(path.join(PY_DIR, 'gen'), dir, { recursive: true });
  const imp = await runCommand(PY, ['-c', 'from leoflow.v1 import agent_pb2_grpc, workflow_pb2_grpc'], {
    env: { PYTHONPATH: dir },
  });
  if (imp.code !== 0) throw new Error(`the generated stubs do not import:\n${imp.stderr}`);
}

/** Starts `python3 args…` with the stubs in `stubs` on PYTHONPATH (and `env` over ours); SIGKILLed after timeoutMs. */
export function startPython(
  stubs: string,
  args: string[],
  timeoutMs: number,
  env: Record<string, string> = {},
): PythonProcess {
  const child = spawn(PY, args, {
    cwd: ROOT,
    env: { ...process.env, ...env, PYTHONPATH: stubs, PYTHONUNBUFFERED: '1' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  live.add(child);
  const p: PythonProcess = { child, stdout: '', stderr: '', exited: undefined as never };
  child.stdout!.setEncoding('utf8').on('data', (c: string) => (p.stdout += c));
  child.stderr!.setEncoding('utf8').on('data', (c: string) => (p.stderr += c));
  const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
  p.exited = new Promise((resolve) =>
    child.on('exit', (code, signal) => {
      clearTimeout(timer);
      live.delete(child);
      resolve(signal ? -1 : code);
    }),
  );
  return p;
}

/** Runs a Python program to its exit. */
export async function runPython(
  stubs: string,
  args: string[],
  timeoutMs = 60_000,
  env: Record<string, string> = {},
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const p = startPython(stubs, args, timeoutMs, env);
  const code = await p.exited;
  return { code, stdout: p.stdout, stderr: p.stderr };
}

/** SIGTERM, then SIGKILL after a grace period; resolves once it has exited. */
export async function stopPython(p: PythonProcess | undefined): Promise<void> {
  if (!p || p.child.exitCode !== null || p.child.signalCode !== null) return;
  p.child.kill('SIGTERM');
  const t = setTimeout(() => p.child.kill('SIGKILL'), 5_000);
  await p.exited;
  clearTimeout(t);
}

/** SIGKILLs every Python process still running (a test file's last hook) and waits for them. */
export async function killPythonProcesses(): Promise<void> {
  const left = [...live];
  for (const c of left) c.kill('SIGKILL');
  await Promise.all(
    left.map((c) => (c.exitCode !== null || c.signalCode !== null ? null : new Promise((r) => c.once('exit', r)))),
  );
}
