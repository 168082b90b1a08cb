import { constants as osConstants } from 'node:os';
import {
  closeSync,
  fstatSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  readSync,
  rmSync,
  statSync,
  unlinkSync,
  writeFileSync,
} from 'node:fs';
import { rm, rmdir, unlink } from 'node:fs/promises';
import path from 'node:path';
import type { Attempt } from '../../core/attempt.js';
import { identify, isSameProcess, type ProcessIdentity } from './process-identity.js';

/** How a task's process ended, as its shim recorded it. */
export interface ExitStatus {
  exitCode: number | null;
  signal: NodeJS.Signals | null;
}

const SIGNAL_NAMES = new Map(Object.entries(osConstants.signals).map(([name, n]) => [n, name as NodeJS.Signals]));

/** A shell's `$?`: 128 + n says the process was killed by signal n. */
export function exitStatusOf(code: number): ExitStatus {
  const signal = code > 128 ? SIGNAL_NAMES.get(code - 128) : undefined;
  return signal ? { exitCode: null, signal } : { exitCode: code, signal: null };
}

/** Every file an attempt's folder holds. */
const FILES = ['attempt.json', 'shim.json', 'stdout', 'stderr', 'status', 'output', 'inputs.json'] as const;

/**
 * The folder in the state directory where one attempt's shim keeps what outlives its parent:
 * the attempt itself (to re-attach to it after a restart), the shim's identity, the task's output
 * and, once it is over, its exit status. Written with synchronous calls: they are few and small,
 * and they sit on a task's start, where a round trip through the thread pool costs more.
 */
export class AttemptDir {
  readonly path: string;

  constructor(dir: string) {
    this.path = dir;
  }

  /** Makes the folder of a new attempt, its record and its empty output files. */
  static create(root: string, attempt: Attempt): AttemptDir {
    const dir = new AttemptDir(
      path.join(path.resolve(root), `${attempt.tiId}.${attempt.tryNumber}.${attempt.attemptToken}`),
    );
    // One call when the root is there (every start but the first); a duplicate dispatch of the
    // same attempt reuses its folder: it is the same attempt.
    try {
      mkdirSync(dir.path, { mode: 0o700 });
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'ENOENT') mkdirSync(dir.path, { recursive: true, mode: 0o700 });
      else if (code !== 'EEXIST') throw err;
    }
    writeFileSync(dir.#file('attempt.json'), JSON.stringify(attempt), { mode: 0o600 });
    for (const out of ['stdout', 'stderr'] as const) writeFileSync(dir.output(out), '', { mode: 0o600, flag: 'a' });
    // The task's output starts empty (GitHub's $GITHUB_OUTPUT does too): empty is "none written".
    writeFileSync(dir.outputFile, '', { mode: 0o600, flag: 'a' });
    if (attempt.inputs && 'json' in attempt.inputs) {
      writeFileSync(dir.inputsFile, attempt.inputs.json, { mode: 0o600 });
    }
    return dir;
  }

  /**
   * Makes this process the one supervisor of the attempts under `root`, or throws naming the live
   * process that is: two servers or agents sharing a state directory would adopt, and kill, each
   * other's tasks.
   */
  static claimRoot(root: string): void {
    mkdirSync(root, { recursive: true, mode: 0o700 });
    const file = path.join(root, 'owner.json');
    const me = identify(process.pid) ?? { pid: process.pid, startTicks: null, bootId: null };
    for (let tries = 0; tries < 2; tries++) {
      try {
        writeFileSync(file, JSON.stringify(me), { mode: 0o600, flag: 'wx' });
        return;
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      }
      let owner: ProcessIdentity | null = null;
      try {
        owner = JSON.parse(readFileSync(file, 'utf8')) as ProcessIdentity;
      } catch {
        // Torn or unreadable: its writer is gone.
      }
      if (owner !== null && owner.pid === me.pid && owner.startTicks === me.startTicks) return;
      if (owner !== null && isSameProcess(owner)) {
        throw new Error(`${root} is in use by process ${owner.pid}: give each server or agent its own --state-dir`);
      }
      unlinkSync(file);
    }
    throw new Error(`${root}: could not claim it (another process claimed it at the same time)`);
  }

  /** Every attempt folder under `root` (none when it does not exist). */
  static list(root: string): AttemptDir[] {
    let names: string[];
    try {
      names = readdirSync(root);
    } catch {
      return [];
    }
    return names
      .filter((n) => /^\d+\.\d+\.[0-9a-f-]+$/.test(n))
      .map((n) => new AttemptDir(path.join(path.resolve(root), n)));
  }

  output(stream: 'stdout' | 'stderr'): string {
    return this.#file(stream);
  }

  /** The file named by LEOFLOW_OUTPUT, where the task writes its output (a JSON value). */
  get outputFile(): string {
    return this.#file('output');
  }

  /** The file named by LEOFLOW_INPUTS: the upstreams' outputs, keyed by task id. */
  get inputsFile(): string {
    return this.#file('inputs.json');
  }

  /**
   * What the task wrote to its output file: at most `maxBytes` + 1 bytes of it (enough to know it
   * is too big without reading a huge file), and the file's whole size. `bytes` null: no file.
   */
  readOutput(maxBytes: number): { bytes: Buffer | null; size: number } {
    let fd: number;
    try {
      fd = openSync(this.outputFile, 'r');
    } catch {
      return { bytes: null, size: 0 };
    }
    try {
      const size = fstatSync(fd).size;
      const buf = Buffer.alloc(Math.min(size, maxBytes + 1));
      let got = 0;
      while (got < buf.length) {
        const n = readSync(fd, buf, got, buf.length - got, got);
        if (n === 0) break;
        got += n;
      }
      return { bytes: buf.subarray(0, got), size };
    } finally {
      closeSync(fd);
    }
  }

  /** Where the shim writes the exit status. */
  get statusFile(): string {
    return this.#file('status');
  }

  recordShim(id: ProcessIdentity): void {
    writeFileSync(this.#file('shim.json'), JSON.stringify(id), { mode: 0o600 });
  }

  readAttempt(): Attempt | null {
    return this.#readJson<Attempt>('attempt.json');
  }

  readShim(): ProcessIdentity | null {
    return this.#readJson<ProcessIdentity>('shim.json');
  }

  /** The exit status, once the shim has written it whole (a newline ends it). */
  readStatus(): ExitStatus | null {
    let text: string;
    try {
      text = readFileSync(this.statusFile, 'utf8');
    } catch {
      return null;
    }
    if (!text.endsWith('\n')) return null;
    const code = Number(text.trim());
    return Number.isInteger(code) && code >= 0 ? exitStatusOf(code) : null;
  }

  /**
   * When the shim wrote the exit status (epoch ms): the status file's modification time, which the
   * shim sets as the task exits, so an end read after a restart is recorded as when it happened.
   * Null when there is no status file.
   */
  statusWrittenAt(): number | null {
    try {
      return statSync(this.statusFile).mtimeMs;
    } catch {
      return null;
    }
  }

  remove(): void {
    rmSync(this.path, { recursive: true, force: true });
  }

  /** Removes the folder off this thread: once an attempt's end is recorded, nothing waits on it, and
   *  its half-dozen unlinks can each wait on the file system's journal. The files it holds are
   *  known, so they are unlinked by name (a recursive removal lists and stats them first); any
   *  other file found in it is removed the long way. */
  async removeLater(): Promise<void> {
    const gone = (err: NodeJS.ErrnoException) => {
      if (err.code !== 'ENOENT') throw err;
    };
    try {
      await Promise.all(FILES.map((f) => unlink(this.#file(f)).catch(gone)));
      await rmdir(this.path).catch(gone);
    } catch {
      await rm(this.path, { recursive: true, force: true });
    }
  }

  #file(name: string): string {
    return path.join(this.path, name);
  }

  #readJson<T>(name: string): T | null {
    try {
      return JSON.parse(readFileSync(this.#file(name), 'utf8')) as T;
    } catch {
      return null;
    }
  }
}
