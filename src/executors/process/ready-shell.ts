import { spawn, type ChildProcess } from 'node:child_process';
import { accessSync, constants, existsSync, statSync } from 'node:fs';
import path from 'node:path';
import type { Readable } from 'node:stream';
import type { Logger } from 'pino';
import { STATUS_FD } from './shim.js';

/**
 * A shim (shim.ts) started ahead of the next attempt: a shell waiting on its stdin for the lines
 * that make it that attempt's supervisor. The attempt then starts without a fork of this process
 * on its way: `spawn()` forks the whole server or agent (its page tables grow with its heap) and
 * waits for the child's exec, which takes several times longer than writing to a ready shell and
 * seeing it start. The fork is still paid, for the next ready shell, but off the attempt's way.
 * A start with no shell ready spawns one (`spawnShell`) and writes the same lines to it.
 *
 * The shell reports on a pipe of its own (fd 3): "cwd" when it could not enter the directory,
 * "." once the task is about to start, and then closes the pipe; a shell that died while it
 * waited closes it having said nothing.
 */

/** How long after `refill` the next shell is made (see `refill`). */
const REFILL_AFTER_MS = 1;
/** Executable lookups are trusted this long (like a shell's hash table, but forgetful). */
const LOOKUP_TTL_MS = 5_000;
const MAX_LOOKUPS = 1_000;

/** How a ready shell's start went: it runs the command, it could not enter the directory, or
 *  it was gone before it read a thing (spawn instead). */
export type ShellStart = { ok: true } | { ok: false; reason: 'cwd' | 'gone' };

/**
 * One shell kept ready at a time. `take` hands it over (or null: none ready, use `spawnNow`);
 * `refill` makes another a moment later. The fork holds this thread as long as a `spawn()` does,
 * so the executor refills when this thread would wait anyway: while an attempt runs, if it runs a
 * few ms, else once its end is on its way to the database or the control plane. Refilled right
 * after each take, the fork would hold up the task's own exit.
 */
export class ReadyShells {
  readonly #shell: string;
  readonly #logger: Logger;
  #ready: ChildProcess | null = null;
  #refill: NodeJS.Timeout | null = null;
  #closed = false;
  readonly #lookups = new Map<string, number>();

  /** Set on top of this process's environment in the shells it starts (the supervisor's mark). */
  readonly #env: Readonly<Record<string, string>>;

  constructor(opts: { logger: Logger; shell?: string; env?: Readonly<Record<string, string>> }) {
    this.#shell = opts.shell ?? '/bin/sh';
    this.#logger = opts.logger;
    this.#env = opts.env ?? {};
  }

  /** Whether the shell exists at all. */
  get usable(): boolean {
    return existsSync(this.#shell);
  }

  /** The ready shell, if there is one and it is alive, now no longer ready (the caller owns it). */
  take(): ChildProcess | null {
    const shell = this.#ready;
    this.#ready = null;
    if (!shell || !alive(shell)) return null;
    shell.removeAllListeners('exit');
    return shell;
  }

  /**
   * Why `file` could not be executed by a process with this PATH and working directory, as
   * `execvp` would say it (ENOENT: not found, EACCES: found but not executable), or null when it
   * can. Lookups that found one are kept a few seconds; a miss is never kept, so a program
   * installed meanwhile is found at once.
   */
  cannotExecute(file: string, pathVar: string | undefined, cwd: string | null): 'ENOENT' | 'EACCES' | null {
    const key = `${pathVar ?? ''}\0${cwd ?? ''}\0${file}`;
    const at = this.#lookups.get(key);
    if (at !== undefined && performance.now() - at < LOOKUP_TTL_MS) return null;
    const base = cwd ?? process.cwd();
    // An empty PATH entry means the working directory, for execvp as for a shell.
    const dirs = file.includes('/') ? [''] : (pathVar ?? '').split(':').map((d) => (d === '' ? '.' : d));
    let why: 'ENOENT' | 'EACCES' = 'ENOENT';
    for (const dir of dirs) {
      const candidate = path.resolve(base, dir, file);
      try {
        if (!statSync(candidate).isFile()) continue;
      } catch {
        continue;
      }
      try {
        accessSync(candidate, constants.X_OK);
      } catch {
        why = 'EACCES';
        continue;
      }
      if (this.#lookups.size >= MAX_LOOKUPS) this.#lookups.clear();
      this.#lookups.set(key, performance.now());
      return null;
    }
    return why;
  }

  /**
   * Makes `shell` the shim of `lines` (from `shimLines`). Resolves once the shell has run them up
   * to the task's start, or could not enter the directory (it then exits 127 by itself).
   */
  start(shell: ChildProcess, lines: string): Promise<ShellStart> {
    const status = shell.stdio[STATUS_FD] as Readable | null;
    if (!status || !alive(shell)) return Promise.resolve({ ok: false, reason: 'gone' });
    return new Promise((resolve) => {
      let said = '';
      status.setEncoding('utf8');
      // "." is the last thing the shell says before the task starts, and nothing it says comes
      // after: the start is known from it, not from the pipe's close, which Node reports a turn
      // of the event loop later.
      status.on('data', (s: string) => {
        said += s;
        if (said === '.') resolve({ ok: true });
      });
      // The pipe's end: the shim closed it, or the shell died (settles nothing after a ".").
      status.once('close', () =>
        resolve(
          said === '.'
            ? { ok: true }
            : said.trim() === 'cwd'
              ? { ok: false, reason: 'cwd' }
              : { ok: false, reason: 'gone' },
        ),
      );
      // A shell gone before it read the lines: its exit and the pipe's end say so.
      shell.stdin?.on('error', () => {});
      shell.stdin?.end(lines);
    });
  }

  /** Ends the ready shell (it exits when its stdin closes) and makes no more. */
  close(): void {
    this.#closed = true;
    if (this.#refill) clearTimeout(this.#refill);
    this.#refill = null;
    const shell = this.#ready;
    this.#ready = null;
    if (shell) {
      shell.removeAllListeners('exit');
      shell.stdin?.end();
    }
  }

  /** A shell made now, for a start that found none ready (null when none can be made). */
  spawnNow(): ChildProcess | null {
    return this.#spawnShell();
  }

  /**
   * Makes a shell ready a moment from now, unless one is. A timer, not an immediate: the writes
   * the caller just queued (a database client's, an HTTP/2 session's) go out on the immediates of
   * this turn and the next, before the fork holds the thread (as long as a `spawn()` does).
   * `stillWanted` is asked again then.
   */
  refill(stillWanted: () => boolean = () => true): void {
    if (this.#closed || this.#refill || (this.#ready && alive(this.#ready))) return;
    this.#refill = setTimeout(() => {
      this.#refill = null;
      if (!this.#closed && !(this.#ready && alive(this.#ready)) && stillWanted()) this.#ready = this.#spawnShell();
    }, REFILL_AFTER_MS);
    this.#refill.unref();
  }

  #giveUp(err: unknown): void {
    this.#logger.error({ err, shell: this.#shell }, 'could not start a shell to supervise tasks');
  }

  #spawnShell(): ChildProcess | null {
    let shell: ChildProcess;
    try {
      // Its own session and process group (`detached`), which the task joins; no pipe it could
      // die writing to once its parent is gone (stdout and stderr are /dev/null).
      shell = spawn(this.#shell, ['-s'], {
        detached: true,
        stdio: ['pipe', 'ignore', 'ignore', 'pipe'],
        env: { ...process.env, ...this.#env },
      });
    } catch (err) {
      this.#giveUp(err);
      return null;
    }
    if (shell.pid === undefined) {
      shell.once('error', (err) => this.#giveUp(err));
      return null;
    }
    shell.on('error', () => {});
    // Died while ready (killed by someone): forgotten, and made again at the next refill.
    shell.once('exit', () => {
      if (this.#ready === shell) this.#ready = null;
    });
    return shell;
  }
}

/** Whether a shell can still be told what to run: not exited, and its status pipe still open (a
 *  shell killed while ready may have closed its pipes before its exit is known here). */
function alive(shell: ChildProcess): boolean {
  const status = shell.stdio[STATUS_FD] as Readable | null;
  return (
    shell.exitCode === null &&
    shell.signalCode === null &&
    status !== null &&
    !status.destroyed &&
    !status.readableEnded
  );
}
