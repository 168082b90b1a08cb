import type { ChildProcess } from 'node:child_process';
import { statSync } from 'node:fs';
import type { Attempt } from '../../core/attempt.js';
import { AttemptDir, type ExitStatus } from './attempt-dir.js';
import { OutputTail } from './output-tail.js';
import { hasExecedChild, identify, isSameProcess, type ProcessIdentity } from './process-identity.js';
import type { ReadyShells } from './ready-shell.js';
import { resolveSecretEnv } from './resolve-secret-env.js';

/** The variable naming the file a task writes its output to (a JSON value). */
export const OUTPUT_ENV = 'LEOFLOW_OUTPUT';
/** The variable naming the file of a task's inputs: its upstreams' outputs, keyed by task id. */
export const INPUTS_ENV = 'LEOFLOW_INPUTS';
import { shimLines } from './shim.js';
import type { SpawnHelper } from './spawn-helper.js';

export type OutputStream = 'stdout' | 'stderr';

/** Lines of each output already in the attempt's log: a re-attached tail starts after them. */
export interface LinesSoFar {
  stdout: number;
  stderr: number;
}

export interface ShimProcessOptions {
  onLine(stream: OutputStream, line: string): void;
}

/** How a shim was started: a ready shell, the spawn helper, or a `spawn()` of its own. */
export type StartedHow = 'ready-shell' | 'spawn-helper' | 'spawn';

export type ShimStart = { ok: true; process: ShimProcess; how: StartedHow } | { ok: false; error: string };

/** A re-attached shim is not our child: its end is seen by looking this often. */
const REATTACHED_POLL_MS = 200;
/** A shim the spawn helper started says when it ends; killed, it cannot: it is looked at this often,
 *  and this often once we have sent its group SIGKILL. */
const HELPER_STARTED_POLL_MS = 1000;
const KILLED_POLL_MS = 5;
/** A SIGTERM waits for the task's exec, looking this often, at most this long (then it is sent). */
const TERM_POLL_MS = 2;
const TERM_WAIT_MAX_MS = 1000;

/**
 * One task's process under its shim (shim.ts), as its parent sees it: started here, or re-attached
 * after a restart. `ended` settles when the shim is gone and the output is read to its end, with
 * the task's exit status, or null when the shim left none (its group was SIGKILLed).
 */
export class ShimProcess {
  readonly dir: AttemptDir;
  /** The shim's pid, which is also the task's process group. */
  readonly pid: number;
  readonly ended: Promise<ExitStatus | null>;
  readonly #identity: ProcessIdentity;
  readonly #tails: OutputTail[];
  /** Looks for the end sooner, once the group was sent SIGKILL (a shim that is not our child). */
  readonly #killed: () => void;
  #gone = false;

  private constructor(
    dir: AttemptDir,
    identity: ProcessIdentity,
    opts: ShimProcessOptions,
    skip: LinesSoFar,
    exited: Promise<void>,
    killed: () => void = () => {},
  ) {
    this.dir = dir;
    this.#killed = killed;
    this.pid = identity.pid;
    this.#identity = identity;
    this.#tails = (['stdout', 'stderr'] as const).map(
      (s) => new OutputTail(dir.output(s), (line) => opts.onLine(s, line), { skipLines: skip[s] }),
    );
    this.ended = exited.then(() => {
      this.#gone = true;
      // The task is over when its shim is: whatever is left in the group (the task itself, when
      // only the shim was killed) must not run on unsupervised.
      killGroup(this.pid);
      for (const tail of this.#tails) tail.finish();
      return dir.readStatus();
    });
  }

  /**
   * Starts `attempt` under a shim: the ready one if there is one, else one made now. Refuses, with
   * the reason, what no process could be started for (the words say what `spawn()` would have).
   */
  static async start(
    shells: ReadyShells,
    helper: SpawnHelper | null,
    root: string,
    attempt: Attempt,
    opts: ShimProcessOptions,
    how: { useReady: boolean },
  ): Promise<ShimStart> {
    const { command, env, cwd } = attempt;
    const file = command[0] ?? '';
    const where = cwd ? ` in ${cwd}` : '';
    const failed = (why: string): ShimStart => ({
      ok: false,
      error: `failed to start ${JSON.stringify(file)}${where}: ${why}`,
    });
    if (file === '') return { ok: false, error: 'failed to start: empty command' };
    if (cwd !== null && !isDirectory(cwd)) return failed('no such directory');
    const missing = shells.cannotExecute(file, env.PATH ?? process.env.PATH, cwd);
    if (missing) return failed(`spawn ${file} ${missing}`);
    // Resolved here and kept in this call only: the attempt (and its record on disk) holds the references.
    const secrets = resolveSecretEnv(attempt.secretEnv);
    if (!secrets.ok) return failed(secrets.error);
    const dir = AttemptDir.create(root, attempt);
    // Inputs are data in a file and in variables, never words of the command: nothing in an
    // upstream's output can run here.
    const inputs = attempt.inputs && 'json' in attempt.inputs ? attempt.inputs : null;
    const fullEnv = {
      ...env,
      ...(inputs ? { ...inputs.env, [INPUTS_ENV]: dir.inputsFile } : {}),
      [OUTPUT_ENV]: dir.outputFile,
      ...secrets.env,
    };
    const shim = shimLines(command, fullEnv, cwd, {
      dir: dir.path,
      stdout: dir.output('stdout'),
      stderr: dir.output('stderr'),
      status: dir.statusFile,
    });
    if ('error' in shim) {
      dir.remove();
      return failed(shim.error);
    }
    let shell = how.useReady ? shells.take() : null;
    if (!shell && helper?.usable) {
      const byHelper = await ShimProcess.#startByHelper(helper, dir, attempt, fullEnv, opts);
      if (byHelper === 'cwd') {
        dir.remove();
        return failed('cannot enter the directory');
      }
      if (byHelper !== 'gone') return { ok: true, process: byHelper, how: 'spawn-helper' };
      // The helper is gone (its starts are proved dead): a start of our own, as without one.
    }
    for (let tries = 0; tries < 2; tries++) {
      const started = shell ? 'ready-shell' : 'spawn';
      shell ??= shells.spawnNow();
      if (!shell || shell.pid === undefined) break;
      // Its exit may come in the same turn as its start, for a task that ends at once.
      const exited = exitOf(shell);
      const result = await shells.start(shell, shim.lines);
      if (result.ok) {
        const identity = identify(shell.pid) ?? { pid: shell.pid, startTicks: null, bootId: null };
        dir.recordShim(identity);
        return {
          ok: true,
          process: new ShimProcess(dir, identity, opts, { stdout: 0, stderr: 0 }, exited),
          how: started,
        };
      }
      if (result.reason === 'cwd') {
        dir.remove();
        return failed('cannot enter the directory');
      }
      // A ready shell that died while it waited (killed by someone): a new one, once.
      shell = null;
    }
    dir.remove();
    return failed('no shell to supervise it (/bin/sh could not be started)');
  }

  static async #startByHelper(
    helper: SpawnHelper,
    dir: AttemptDir,
    attempt: Attempt,
    env: Record<string, string>,
    opts: ShimProcessOptions,
  ): Promise<ShimProcess | 'cwd' | 'gone'> {
    const n = helper.nextNumber();
    const shim = shimLines(
      attempt.command,
      env,
      attempt.cwd,
      { dir: dir.path, stdout: dir.output('stdout'), stderr: dir.output('stderr'), status: dir.statusFile },
      n,
    );
    if ('error' in shim) throw new Error(`shim lines refused after being accepted: ${shim.error}`);
    let said!: () => void;
    const endSaid = new Promise<void>((resolve) => (said = resolve));
    const started = await helper.start(n, dir.path, shim.lines, () => said());
    if (!started.ok) return started.reason;
    const identity = identify(started.pid) ?? { pid: started.pid, startTicks: null, bootId: null };
    dir.recordShim(identity);
    const watch = watchEnd(identity, endSaid, started.ended);
    return new ShimProcess(dir, identity, opts, { stdout: 0, stderr: 0 }, watch.exited, watch.killed);
  }

  /**
   * Re-attaches to the shim of an attempt started by an earlier process (after a crash or a
   * restart), or null when the shim is gone (then `dir.readStatus()` says how the task ended).
   */
  static reattach(dir: AttemptDir, opts: ShimProcessOptions, skip: LinesSoFar): ShimProcess | null {
    const identity = dir.readShim();
    if (identity === null || !isSameProcess(identity)) return null;
    const exited = new Promise<void>((resolve) => {
      const timer = setInterval(() => {
        if (dir.readStatus() !== null || !isSameProcess(identity)) {
          clearInterval(timer);
          resolve();
        }
      }, REATTACHED_POLL_MS);
    });
    return new ShimProcess(dir, identity, opts, skip, exited);
  }

  /** Reads an ended attempt's output from where its log stopped, to the end. */
  static readRest(dir: AttemptDir, opts: ShimProcessOptions, skip: LinesSoFar): void {
    for (const s of ['stdout', 'stderr'] as const)
      new OutputTail(dir.output(s), (line) => opts.onLine(s, line), { skipLines: skip[s] }).finish();
  }

  /**
   * Signals the task's whole process group (never a process that merely reuses the pid). A
   * SIGTERM waits until the task has exec'd (a few ms at most after its start): sent in the instant
   * before, it would reach the shim alone, which holds it until the task ends (shim.ts), and the
   * task would only meet the SIGKILL after the grace.
   */
  signalGroup(signal: 'SIGTERM' | 'SIGKILL'): void {
    if (this.#gone || !isSameProcess(this.#identity)) return;
    if (signal === 'SIGTERM' && hasExecedChild(this.pid) === false) {
      this.#termOnceStarted(Date.now() + TERM_WAIT_MAX_MS);
      return;
    }
    try {
      process.kill(-this.pid, signal);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ESRCH') throw err;
    }
    if (signal === 'SIGKILL') this.#killed();
  }

  #termOnceStarted(deadline: number): void {
    if (this.#gone || !isSameProcess(this.#identity)) return;
    if (hasExecedChild(this.pid) === false && Date.now() < deadline) {
      setTimeout(() => this.#termOnceStarted(deadline), TERM_POLL_MS);
      return;
    }
    try {
      process.kill(-this.pid, 'SIGTERM');
    } catch {
      // Gone meanwhile (ESRCH), or not ours to signal: the grace's SIGKILL follows either way.
    }
  }
}

function killGroup(pid: number): void {
  try {
    process.kill(-pid, 'SIGKILL');
  } catch {
    // ESRCH: nothing left in it.
  }
}

/**
 * The end of a shim that is not our child (the spawn helper's): when it says so, or when its pid
 * no longer names it (it was killed and said nothing), looked at slowly, and often once `killed`.
 */
function watchEnd(
  identity: ProcessIdentity,
  said: Promise<void>,
  ended: () => void,
): { exited: Promise<void>; killed: () => void } {
  let timer: NodeJS.Timeout | null = null;
  let over = false;
  let resolve!: () => void;
  const exited = new Promise<void>((r) => (resolve = r));
  const end = () => {
    if (over) return;
    over = true;
    if (timer) clearTimeout(timer);
    ended();
    resolve();
  };
  const look = (ms: number) => {
    if (timer) clearTimeout(timer);
    timer = setTimeout(() => (isSameProcess(identity) ? look(ms) : end()), ms);
  };
  void said.then(end);
  look(HELPER_STARTED_POLL_MS);
  return { exited, killed: () => !over && look(KILLED_POLL_MS) };
}

function exitOf(shell: ChildProcess): Promise<void> {
  if (shell.exitCode !== null || shell.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => shell.once('exit', () => resolve()));
}

function isDirectory(p: string): boolean {
  try {
    return statSync(p).isDirectory();
  } catch {
    return false;
  }
}
