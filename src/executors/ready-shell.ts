import { spawn, type ChildProcess } from 'node:child_process';
import { accessSync, constants, existsSync, statSync } from 'node:fs';
import path from 'node:path';
import type { Readable } from 'node:stream';
import type { Logger } from 'pino';

/**
 * A shell started ahead of the next attempt, waiting on its stdin for the few lines that make it
 * that attempt's process: `cd` to its directory, `export` its environment, `exec` its command.
 * The attempt's process is then the shell's, pid and process group included, and it starts
 * without a fork of this process on its way: `spawn()` forks the whole server or agent (its page
 * tables grow with its heap) and waits for the child's exec, which takes several times longer
 * than writing to a ready shell and seeing it exec. The fork is still paid, for the next ready
 * shell, but off the attempt's way.
 *
 * Only what a shell runs exactly as `spawn()` would is started this way (`execLines`); anything
 * else, or no shell ready, is spawned as before. Where a shell cannot say how it went, nothing is
 * guessed: the command is checked to be an executable file on the PATH the attempt gets and the
 * directory to exist before a shell is used (else `spawn()` reports the failure, word for word as
 * always). The shell reports on a pipe of its own (fd 3): "cwd" when it could not enter the
 * directory, "." right before the `exec`, which closes the pipe; a shell that died while it
 * waited closes it having said nothing, and the attempt is spawned instead. The start is known
 * from the "." (the pipe's close says no more: the `exec` closes it before it runs the command).
 */

/** Extra pipe of a ready shell: "cwd" comes on it when `cd` failed, "." just before the `exec`,
 *  which closes it. */
const STATUS_FD = 3;
/** How long after `refill` the next shell is made (see `refill`). */
const REFILL_AFTER_MS = 1;
/** Executable lookups are trusted this long (like a shell's hash table, but forgetful). */
const LOOKUP_TTL_MS = 5_000;
const MAX_LOOKUPS = 1_000;

/** Environment names a shell can `export`. */
const NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** A single-quoted shell word: every byte but NUL stands for itself. */
export function shellQuote(s: string): string {
  return `'${s.replaceAll("'", `'\\''`)}'`;
}

/**
 * The lines a ready shell runs to become this command's process, or null when a shell would not
 * run it exactly as `spawn()` does (the caller spawns it then): a NUL anywhere (spawn refuses
 * it), an environment name a shell cannot export, an empty command or one a shell would read as
 * an option. stdin is /dev/null, as `spawn()` gives it here (`stdio: 'ignore'`).
 */
export function execLines(command: readonly string[], env: Readonly<Record<string, string>>, cwd: string | null): string | null {
  const [file] = command;
  if (file === undefined || file === '' || file.startsWith('-')) return null;
  const words = [...command, ...Object.keys(env), ...Object.values(env), cwd ?? ''];
  if (words.some((w) => w.includes('\0'))) return null;
  if (Object.keys(env).some((k) => !NAME.test(k))) return null;
  const lines: string[] = [];
  if (cwd !== null) lines.push(`cd -- ${shellQuote(cwd)} 2>/dev/null || { echo cwd >&${STATUS_FD}; exit 127; }`);
  for (const [k, v] of Object.entries(env)) lines.push(`export ${k}=${shellQuote(v)}`);
  // "." says the lines were read and run up to the exec: a shell killed while it waited closes
  // the pipe too, but says nothing.
  lines.push(`printf . >&${STATUS_FD}`);
  lines.push(`exec ${command.map(shellQuote).join(' ')} </dev/null ${STATUS_FD}>&-`);
  return lines.join('\n') + '\n';
}

/** How a ready shell's start went: it runs the command, it could not enter the directory, or
 *  it was gone before it read a thing (spawn instead). */
export type ShellStart = { ok: true } | { ok: false; reason: 'cwd' | 'gone' };

/**
 * One shell kept ready at a time. `take` hands it over (or null: none ready, use `spawn()`);
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

  constructor(opts: { logger: Logger; shell?: string }) {
    this.#shell = opts.shell ?? '/bin/sh';
    this.#logger = opts.logger;
  }

  /** Whether the shell exists at all (else every start is a `spawn()`). */
  get usable(): boolean {
    return !this.#closed && existsSync(this.#shell);
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
   * Whether `file` names an executable regular file for a process with this PATH and working
   * directory (found as `execvp` and a shell find it). Lookups that found one are kept a few
   * seconds; a miss is never kept, so a program installed meanwhile is found at once.
   */
  findsExecutable(file: string, pathVar: string | undefined, cwd: string | null): boolean {
    const key = `${pathVar ?? ''}\0${cwd ?? ''}\0${file}`;
    const at = this.#lookups.get(key);
    if (at !== undefined && performance.now() - at < LOOKUP_TTL_MS) return true;
    const base = cwd ?? process.cwd();
    let dirs: string[];
    if (file.includes('/')) dirs = [''];
    else {
      // An empty PATH entry means the working directory: left to spawn().
      dirs = (pathVar ?? '').split(':');
      if (dirs.some((d) => d === '')) return false;
    }
    for (const dir of dirs) {
      const candidate = path.resolve(base, dir, file);
      try {
        if (!statSync(candidate).isFile()) continue;
        accessSync(candidate, constants.X_OK);
      } catch {
        continue;
      }
      if (this.#lookups.size >= MAX_LOOKUPS) this.#lookups.clear();
      this.#lookups.set(key, performance.now());
      return true;
    }
    return false;
  }

  /**
   * Makes `shell` the process of `lines` (from `execLines`). Resolves once the shell has run them
   * up to the `exec`, or could not enter the directory (it then exits 127 by itself).
   */
  start(shell: ChildProcess, lines: string): Promise<ShellStart> {
    const status = shell.stdio[STATUS_FD] as Readable | null;
    if (!status || !alive(shell)) return Promise.resolve({ ok: false, reason: 'gone' });
    return new Promise((resolve) => {
      let said = '';
      status.setEncoding('utf8');
      // "." is the last thing the shell says before the `exec`, and nothing it says comes after:
      // the start is known from it, not from the pipe's close, which Node reports a turn of the
      // event loop later.
      status.on('data', (s: string) => {
        said += s;
        if (said === '.') resolve({ ok: true });
      });
      // The pipe's end: `exec` closed it, or the shell died (settles nothing after a ".").
      status.once('close', () => resolve(said === '.' ? { ok: true } : said.trim() === 'cwd' ? { ok: false, reason: 'cwd' } : { ok: false, reason: 'gone' }));
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
      shell.stdout?.destroy();
      shell.stderr?.destroy();
    }
  }

  /**
   * Makes a shell ready a moment from now, unless one is. A timer, not an immediate: the writes
   * the caller just queued (a database client's, an HTTP/2 session's) go out on the immediates of
   * this turn and the next, before the fork holds the thread (as long as a `spawn()` does).
   */
  refill(): void {
    if (this.#closed || this.#refill || (this.#ready && alive(this.#ready))) return;
    this.#refill = setTimeout(() => {
      this.#refill = null;
      if (!this.#closed && !(this.#ready && alive(this.#ready))) this.#ready = this.#spawnShell();
    }, REFILL_AFTER_MS);
    this.#refill.unref();
  }

  /** No shell can be started here: every attempt is spawned from now on. */
  #giveUp(err: unknown): void {
    this.#logger.warn({ err, shell: this.#shell }, 'could not start a ready shell; attempts are spawned directly');
    this.#closed = true;
  }

  #spawnShell(): ChildProcess | null {
    let shell: ChildProcess;
    try {
      shell = spawn(this.#shell, ['-s'], { detached: true, stdio: ['pipe', 'pipe', 'pipe', 'pipe'], env: process.env });
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
      shell.stdout?.destroy();
      shell.stderr?.destroy();
    });
    return shell;
  }
}

/** Whether a shell can still be told what to run: not exited, and its status pipe still open (a
 *  shell killed while ready may have closed its pipes before its exit is known here). */
function alive(shell: ChildProcess): boolean {
  const status = shell.stdio[STATUS_FD] as Readable | null;
  return shell.exitCode === null && shell.signalCode === null && status !== null && !status.destroyed && !status.readableEnded;
}
