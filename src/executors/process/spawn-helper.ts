import { spawn, type ChildProcess } from 'node:child_process';
import { accessSync, constants } from 'node:fs';
import path from 'node:path';
import type { Logger } from 'pino';
import { killAttemptGroups } from './orphans.js';
import { ATTEMPT_DIR_ENV, STATUS_FD, shellQuote } from './shim.js';

/**
 * A speed seam, safe to skip when reading the shim: with it off (`spawnHelper: false`, or no
 * `setsid`), a start that finds no ready shell is a `spawn()`, and nothing else changes.
 *
 * A small shell, started once, that starts shims on request: a busy agent or server writes it one
 * line a start instead of calling `spawn()`, which forks the whole Node process (~100 MB, ~1 ms of
 * this thread a start) and waits for the child's exec. The helper forks itself (a shell of ~2 MB),
 * and `setsid` makes the shim a session and group leader as `spawn({ detached })` does, so the
 * shim outlives the helper and its parent alike. The helper is the shim's parent and is told to
 * reap it (`wait <pid>`) once it has ended: a shim handed to PID 1 instead would stay a zombie
 * where PID 1 does not reap (an agent that is itself a container's PID 1).
 *
 * Every shim of a helper reports on one pipe, the helper's stdout, tagged with its start's number
 * (shim.ts): "<n> . <pid>" as the task starts, "<n> cwd <pid>" when it could not enter the directory,
 * "<n> end" once the status is written. A shim killed by SIGKILL says nothing more: its parent
 * (here) watches its pid for that (shim-process.ts).
 */

/** What a start's shim said: its pid as its task starts (`ended` to be called once it is gone), or
 *  why it did not start. */
export type HelperStart = { ok: true; pid: number; ended: () => void } | { ok: false; reason: 'cwd' | 'gone' };

/** A shim that has not said it started after this long is killed, and the start given up. */
const START_LIMIT_MS = 30_000;

interface Pending {
  attemptDir: string;
  helper: ChildProcess;
  resolve(start: HelperStart): void;
  timer: NodeJS.Timeout;
}

export class SpawnHelper {
  readonly #shell: string;
  readonly #setsid: string | null;
  readonly #logger: Logger;
  #child: ChildProcess | null = null;
  #next = 1;
  readonly #pending = new Map<number, Pending>();
  readonly #ends = new Map<number, () => void>();
  #closed = false;

  /** Set on top of this process's environment in the shells it starts (the supervisor's mark). */
  readonly #env: Readonly<Record<string, string>>;

  constructor(opts: { logger: Logger; shell?: string; env?: Readonly<Record<string, string>> }) {
    this.#shell = opts.shell ?? '/bin/sh';
    this.#logger = opts.logger;
    this.#env = opts.env ?? {};
    this.#setsid = findOnPath('setsid', process.env.PATH);
  }

  /** Whether shims can be started this way here (`setsid` is on the PATH). */
  get usable(): boolean {
    return this.#setsid !== null && !this.#closed;
  }

  /** A number for the next start: its shim's lines (shimLines) are written with it. */
  nextNumber(): number {
    return this.#next++;
  }

  /**
   * Starts the shim of `lines` (from shimLines, with `n`) as start `n`. Resolves as
   * the task starts, with the shim's pid, or with why not: it could not enter the directory, or it
   * never came (the helper is gone; then no process of it runs: they are found and killed first).
   */
  start(n: number, attemptDir: string, lines: string, onEnd: () => void): Promise<HelperStart> {
    const helper = this.#helper();
    if (!helper?.stdin?.writable) return Promise.resolve({ ok: false, reason: 'gone' });
    return new Promise((resolve) => {
      const timer = setTimeout(() => this.#giveUp([n], 'did not start in time'), START_LIMIT_MS);
      timer.unref();
      this.#pending.set(n, { attemptDir, helper, resolve, timer });
      // Known before the start settles: a task that ends at once says so in the same read.
      this.#ends.set(n, onEnd);
      // The helper's child execs `setsid`, which makes it a session and group leader and execs the
      // shim's shell: one pid all along, the helper's child (`$!`). The shell reads the lines from
      // a here-document (a pipe), as a ready shell reads them from its stdin: no file to write.
      const q = shellQuote;
      const end = hereDocEnd(lines, n);
      tell(
        helper,
        `${ATTEMPT_DIR_ENV}=${q(attemptDir)} ${q(this.#setsid!)} ${q(this.#shell)} -s ${STATUS_FD}>&1 >/dev/null ` +
          `2>&1 <<'${end}' &\n${lines}${end}\n`,
      );
    });
  }

  /** Ends the helper (it exits when its stdin closes) and stops reading its shims: for when no
   *  attempt runs any more (a shim it started would run on, unwatched). */
  close(): void {
    this.#closed = true;
    this.#child?.stdin?.end();
    this.#child?.stdout?.destroy();
    this.#child = null;
  }

  #helper(): ChildProcess | null {
    if (this.#closed || this.#setsid === null) return null;
    if (this.#child && this.#child.exitCode === null && this.#child.signalCode === null) return this.#child;
    let child: ChildProcess;
    try {
      // Its own session, so a terminal's Ctrl-C reaches the agent, not the shims on their way.
      child = spawn(this.#shell, ['-s'], {
        detached: true,
        stdio: ['pipe', 'pipe', 'ignore'],
        env: { ...process.env, ...this.#env },
      });
    } catch (err) {
      this.#logger.error({ err, shell: this.#shell }, 'could not start the spawn helper');
      return null;
    }
    if (child.pid === undefined) {
      child.once('error', (err) => this.#logger.error({ err, shell: this.#shell }, 'could not start the spawn helper'));
      return null;
    }
    child.on('error', () => {});
    child.stdin!.on('error', () => {});
    // Shims keep this pipe after the helper is gone: what they say is read as long as one lives.
    let buffered = '';
    child.stdout!.setEncoding('utf8');
    child.stdout!.on('data', (chunk: string) => {
      buffered += chunk;
      let nl: number;
      while ((nl = buffered.indexOf('\n')) >= 0) {
        this.#said(buffered.slice(0, nl));
        buffered = buffered.slice(nl + 1);
      }
    });
    const pid = child.pid;
    child.once('exit', () => {
      if (this.#child === child) this.#child = null;
      // What it was asked to start and has not come: its group holds any start not yet a session
      // of its own; those that are, carry their folder in their environment.
      try {
        process.kill(-pid, 'SIGKILL');
      } catch {
        // ESRCH: nothing left in it.
      }
      this.#giveUp([...this.#pending.keys()], 'the spawn helper exited');
    });
    this.#child = child;
    return child;
  }

  #said(line: string): void {
    const [n, what, pid] = line.split(' ');
    const id = Number(n);
    if (what === 'end') {
      const onEnd = this.#ends.get(id);
      this.#ends.delete(id);
      onEnd?.();
      return;
    }
    const pending = this.#pending.get(id);
    if (!pending) return;
    this.#pending.delete(id);
    clearTimeout(pending.timer);
    if (what === '.' && Number(pid) > 0) {
      const { helper } = pending;
      pending.resolve({
        ok: true,
        pid: Number(pid),
        ended: () => {
          this.#ends.delete(id);
          // Its parent reaps it; a helper started since is not its parent (it was handed to PID 1).
          if (helper === this.#child) tell(helper, `wait ${Number(pid)}\n`);
        },
      });
      return;
    }
    this.#ends.delete(id);
    // A shim that could not enter the directory exits at once: its parent reaps it.
    if (what === 'cwd' && Number(pid) > 0 && pending.helper === this.#child)
      tell(pending.helper, `wait ${Number(pid)}\n`);
    pending.resolve({ ok: false, reason: what === 'cwd' ? 'cwd' : 'gone' });
  }

  /** Proves the shims of these starts dead (killing any that came meanwhile), then settles them as gone. */
  #giveUp(ns: number[], why: string): void {
    const given = ns
      .map((n) => [n, this.#pending.get(n)] as const)
      .filter((e): e is [number, Pending] => e[1] !== undefined);
    if (given.length === 0) return;
    const killed = killAttemptGroups(new Set(given.map(([, p]) => p.attemptDir)));
    this.#logger.warn({ starts: given.length, killed: killed.length, why }, 'spawn helper: starts given up');
    for (const [n, p] of given) {
      this.#pending.delete(n);
      this.#ends.delete(n);
      clearTimeout(p.timer);
      p.resolve({ ok: false, reason: 'gone' });
    }
  }
}

/** Writes to the helper, the writes of this turn in one go (a burst of starts or ends, one wake-up
 *  of the helper instead of one each). */
function tell(helper: ChildProcess, text: string): void {
  const stdin = helper.stdin;
  if (!stdin || !stdin.writable) return;
  if (stdin.writableCorked === 0) {
    stdin.cork();
    process.nextTick(() => stdin.uncork());
  }
  stdin.write(text);
}

/** A here-document's last line that none of `lines` is (the lines are the task's own words). */
function hereDocEnd(lines: string, n: number): string {
  const taken = new Set(lines.split('\n'));
  let end = `LEOFLOW_SHIM_${n}`;
  while (taken.has(end)) end += '_';
  return end;
}

/** The executable `name` on `pathVar`, or null. */
function findOnPath(name: string, pathVar: string | undefined): string | null {
  for (const dir of (pathVar ?? '').split(':')) {
    if (!path.isAbsolute(dir)) continue;
    const candidate = path.join(dir, name);
    try {
      accessSync(candidate, constants.X_OK);
      return candidate;
    } catch {
      // not here
    }
  }
  return null;
}
