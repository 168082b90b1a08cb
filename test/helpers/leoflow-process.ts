import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { freePort } from './global-setup.js';

export const ROOT = fileURLToPath(new URL('../../', import.meta.url));
export const BIN = fileURLToPath(new URL('../../bin/leoflow.js', import.meta.url));

export interface ServerProcess {
  child: ChildProcess;
  url: string;
  /** http://host:port/metrics */
  metricsUrl: string;
  /** Every JSON log record the server printed so far. */
  logs: Record<string, unknown>[];
  /** What the server wrote to stderr so far (an uncaught exception lands there). */
  stderr(): string;
  /** Resolves with the exit code (or signal) once the process has exited. */
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** SIGTERM, then wait for a graceful exit (SIGKILL after timeoutMs). */
  stop(timeoutMs?: number): Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  kill(): Promise<void>;
}

const live = new Set<ChildProcess>();
/** The data directories of the embedded Postgres servers these processes started or adopted. */
const embeddedDataDirs = new Set<string>();

/**
 * Stops every embedded Postgres a server of this file left running. A SIGKILLed server leaves its
 * Postgres up on purpose (the next start adopts it), so a test that ends early, or kills last,
 * would leave it behind: call this in the file's last hook. SIGQUIT is Postgres's immediate stop.
 */
export function stopLeftEmbeddedPostgres(): void {
  for (const dir of embeddedDataDirs) {
    let pid = NaN;
    try {
      pid = Number(readFileSync(path.join(dir, 'postmaster.pid'), 'utf8').split('\n')[0]);
    } catch {
      // No pid file: it stopped cleanly.
    }
    if (Number.isInteger(pid) && pid > 0) {
      try {
        process.kill(pid, 'SIGQUIT');
      } catch {
        // Gone already.
      }
    }
    embeddedDataDirs.delete(dir);
  }
}
const scratch = new Set<string>();
process.on('exit', () => {
  for (const c of live) c.kill('SIGKILL');
  for (const d of scratch) rmSync(d, { recursive: true, force: true });
});

/** A temporary folder removed when the test process exits. */
export function scratchDir(prefix: string): string {
  const dir = mkdtempSync(path.join(os.tmpdir(), prefix));
  scratch.add(dir);
  return dir;
}

/**
 * Starts the real `leoflow server` process (the compiled build, as a user runs it) and resolves
 * once it logs that it is ready. `args` are extra flags; `env` is merged over process.env.
 */
export async function startServer(
  opts: {
    args?: string[];
    env?: Record<string, string | undefined>;
    cwd?: string;
    readyTimeoutMs?: number;
    ownProcessGroup?: boolean;
    /** Logs at warn only (benchmarks): ready is then told by the metrics endpoint answering. */
    quiet?: boolean;
  } = {},
): Promise<ServerProcess> {
  const ports = opts.quiet ? [await freePort(), await freePort()] : [0, 0];
  const quietArgs = opts.quiet ? ['--log-level', 'warn'] : [];
  // A state directory of its own, unless the test chose one (to restart onto it) or a folder to
  // run in: servers share nothing through the repository's .leoflow.
  const stateArgs = opts.args?.includes('--state-dir') || opts.cwd ? [] : ['--state-dir', scratchDir('leoflow-state-')];
  // LEOFLOW_CPU_PROF_DIR: each server writes a V8 CPU profile there when it stops (BENCHMARKS.md).
  const profArgs = process.env.LEOFLOW_CPU_PROF_DIR
    ? ['--cpu-prof', `--cpu-prof-dir=${process.env.LEOFLOW_CPU_PROF_DIR}`]
    : [];
  const child = spawn(
    process.execPath,
    [
      ...profArgs,
      BIN,
      'server',
      '--listen',
      `127.0.0.1:${ports[0]}`,
      '--metrics-listen',
      `127.0.0.1:${ports[1]}`,
      '--log-format',
      'json',
      ...quietArgs,
      ...stateArgs,
      ...(opts.args ?? []),
    ],
    {
      cwd: opts.cwd ?? ROOT,
      // Open unless the test is about auth (it sets LEOFLOW_INSECURE itself, or unsets it): Pro
      // and Lite off loopback need tokens otherwise.
      env: { ...process.env, LEOFLOW_INSECURE: 'true', ...opts.env },
      stdio: ['ignore', 'pipe', 'pipe'],
      // Its own process group, like a program started at a terminal (whose Ctrl-C reaches the group).
      detached: opts.ownProcessGroup ?? false,
    },
  );
  live.add(child);
  const logs: Record<string, unknown>[] = [];
  let stderr = '';
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    child.on('exit', (code, signal) => {
      live.delete(child);
      resolve({ code, signal });
    });
  });
  const url = await new Promise<string>((resolve, reject) => {
    let buf = '';
    const timer = setTimeout(() => {
      // Never leave a process behind, even when the test fails here.
      child.kill('SIGKILL');
      reject(
        new Error(
          `server not ready after ${opts.readyTimeoutMs ?? 30000} ms:\n${logs
            .slice(-10)
            .map((l) => JSON.stringify(l))
            .join('\n')}\n${buf}${stderr}`,
        ),
      );
    }, opts.readyTimeoutMs ?? 30_000);
    child.stdout!.setEncoding('utf8');
    child.stdout!.on('data', (chunk: string) => {
      buf += chunk;
      let nl;
      while ((nl = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        try {
          const rec = JSON.parse(line) as Record<string, unknown>;
          logs.push(rec);
          if (typeof rec.dataDir === 'string') embeddedDataDirs.add(rec.dataDir);
          if (typeof rec.listen === 'string' && String(rec.msg).includes('ready')) {
            clearTimeout(timer);
            resolve(`http://${rec.listen}`);
          }
        } catch {
          // not a log record
        }
      }
    });
    child.stderr!.setEncoding('utf8');
    child.stderr!.on('data', (c: string) => (stderr += c));
    if (opts.quiet) {
      const poll = async () => {
        for (;;) {
          if (child.exitCode !== null || child.signalCode !== null) return;
          // The body is read to its end: one left unread holds its socket open (paused) until it is
          // collected, past the server's exit, and the file's leak check sees it.
          const ok = await fetch(`http://127.0.0.1:${ports[1]}/metrics`)
            .then(async (r) => (await r.arrayBuffer(), r.ok))
            .catch(() => false);
          if (ok) {
            clearTimeout(timer);
            logs.push({
              listen: `127.0.0.1:${ports[0]}`,
              metrics: `127.0.0.1:${ports[1]}`,
              msg: 'ready (metrics answering)',
            });
            return resolve(`http://127.0.0.1:${ports[0]}`);
          }
          await new Promise((r) => setTimeout(r, 50));
        }
      };
      void poll();
    }
    void exited.then(({ code, signal }) => {
      clearTimeout(timer);
      reject(
        new Error(
          `server exited before ready (code ${code}, signal ${signal}):\n${stderr}\n${JSON.stringify(logs.slice(-5))}`,
        ),
      );
    });
  });
  const ready = logs.find((l) => typeof l.listen === 'string')!;
  return {
    child,
    url,
    metricsUrl: `http://${String(ready.metrics)}/metrics`,
    logs,
    stderr: () => stderr,
    exited,
    // The server's own stop ends by --shutdown-grace (30 s by default) plus a moment for each step
    // past it, so the test waits longer than that before it kills: a SIGKILL here would hide which
    // step was slow. What the server said while stopping is printed when it had to be killed.
    async stop(timeoutMs = 45_000) {
      if (child.exitCode !== null || child.signalCode !== null) return exited;
      const from = logs.length;
      child.kill('SIGTERM');
      let killed = false;
      const t = setTimeout(() => {
        killed = true;
        child.kill('SIGKILL');
      }, timeoutMs);
      const r = await exited;
      clearTimeout(t);
      if (killed) {
        const said = logs.slice(from).map((l) => `${String(l.msg)}${l.step ? ` (${String(l.step)})` : ''}`);
        console.error(`server ${url} did not stop within ${timeoutMs} ms of SIGTERM; it said:\n  ${said.join('\n  ')}`);
      }
      return r;
    },
    async kill() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      await exited;
    },
  };
}

/**
 * A launcher of `leoflow server` processes on one database: each is started with `args` and then
 * the call's own, and kept in `servers` for the file's hooks to stop. `databaseUrl` is read at
 * each start (the database is usually made in a beforeAll).
 */
export function serverLauncher(opts: {
  databaseUrl: () => string;
  args?: readonly string[];
  servers: ServerProcess[];
}): (extraArgs?: readonly string[]) => Promise<ServerProcess> {
  return async (extraArgs = []) => {
    const s = await startServer({
      env: { DATABASE_URL: opts.databaseUrl() },
      args: [...(opts.args ?? []), ...extraArgs],
    });
    opts.servers.push(s);
    return s;
  };
}

export interface CliResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs the real `leoflow` CLI against a server. */
export function cli(server: string | null, args: string[], opts: RunOptions = {}): Promise<CliResult> {
  return runCommand(process.execPath, [BIN, ...(server ? ['--server', server] : []), ...args], opts);
}

export interface RunOptions {
  timeoutMs?: number;
  cwd?: string;
  /** Merged over process.env; an undefined value unsets the variable. */
  env?: Record<string, string | undefined>;
  /** Called with the process once it is started (to signal it, say). */
  onSpawn?: (child: ChildProcess) => void;
}

/** Runs a command to its exit, collecting its output; killed (and the promise rejected) at the timeout. */
export function runCommand(cmd: string, args: string[], opts: RunOptions = {}): Promise<CliResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, {
      cwd: opts.cwd ?? ROOT,
      env: { ...process.env, ...opts.env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    live.add(child);
    opts.onSpawn?.(child);
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (c: string) => (stdout += c));
    child.stderr.setEncoding('utf8').on('data', (c: string) => (stderr += c));
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(
        new Error(
          `${path.basename(cmd)} ${args.join(' ')} took longer than ${opts.timeoutMs ?? 60000} ms\n${stdout}\n${stderr}`,
        ),
      );
    }, opts.timeoutMs ?? 60_000);
    child.on('exit', (code) => {
      clearTimeout(timer);
      live.delete(child);
      resolve({ code, stdout, stderr });
    });
  });
}

/** Polls `check` until it returns a truthy value or the deadline passes. */
export async function waitFor<T>(
  what: string,
  check: () => Promise<T | null | undefined | false>,
  timeoutMs = 20_000,
  everyMs = 50,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await check();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

export interface AgentProcess {
  child: ChildProcess;
  output(): string;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** SIGTERM and wait (SIGKILL after timeoutMs). */
  stop(timeoutMs?: number): Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

/**
 * Starts a real `leoflow agent` process against `server` (a URL), with a state directory of its
 * own unless `args` name one. `env` is merged over process.env; `cwd` is the project's root unless
 * given.
 */
export function startAgent(
  server: string,
  args: string[],
  opts: { cwd?: string; env?: Record<string, string | undefined> } = {},
): AgentProcess {
  const stateArgs = args.includes('--state-dir') ? [] : ['--state-dir', scratchDir('leoflow-agent-state-')];
  const child = spawn(
    process.execPath,
    [BIN, '--server', server, 'agent', '--log-format', 'json', ...stateArgs, ...args],
    {
      cwd: opts.cwd ?? ROOT,
      env: { ...process.env, ...opts.env },
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  live.add(child);
  let out = '';
  child.stdout!.setEncoding('utf8').on('data', (c: string) => (out += c));
  child.stderr!.setEncoding('utf8').on('data', (c: string) => (out += c));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.on('exit', (code, signal) => {
      live.delete(child);
      resolve({ code, signal });
    }),
  );
  return {
    child,
    output: () => out,
    exited,
    async stop(timeoutMs = 20_000) {
      if (child.exitCode !== null || child.signalCode !== null) return exited;
      try {
        child.kill('SIGCONT');
      } catch {
        // gone
      }
      child.kill('SIGTERM');
      const t = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
      const r = await exited;
      clearTimeout(t);
      return r;
    },
  };
}
