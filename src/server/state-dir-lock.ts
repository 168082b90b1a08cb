import { linkSync, mkdirSync, readFileSync, renameSync, unlinkSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { identify, isSameProcess, type ProcessIdentity } from '../executors/process/process-identity.js';

/**
 * One server per state directory. Two would share an embedded Postgres (the second adopting, then
 * stopping, the first's) and an attempts folder (each adopting the other's tasks), so a server
 * takes the state directory before it touches either, and a second one refuses, naming the first.
 *
 * Node has no flock(2), so the lock is a file created exclusively, holding its owner's identity
 * (pid, start time and boot id: `process-identity.ts`), which tells a live owner from a dead one
 * whose pid was reused. A dead owner's file is taken over (two servers starting in the same instant
 * after a crash could both take it: the window is the few microseconds between a read and a remove). The
 * owner's API URL is written in it once the API listens, so the second can say where the first answers.
 */

/** The file, in the state directory. */
export const LOCK_FILE = 'server.lock';

/** What the lock file holds. */
export interface StateDirOwner extends ProcessIdentity {
  /** The owner's API, once it listens. */
  url: string | null;
  startedAt: string;
}

/** Another live server holds the state directory. */
export class StateDirBusyError extends Error {
  override readonly name = 'StateDirBusyError';
  constructor(
    readonly stateDir: string,
    readonly owner: StateDirOwner,
  ) {
    super(
      `already running: pid ${owner.pid}, ` +
        `${owner.url ?? 'its API not listening yet'} (state directory ${stateDir}); stop it first, ` +
        `or give this server another --state-dir`,
    );
  }
}

export interface StateDirLock {
  readonly stateDir: string;
  /** Records where this server's API answers, for a second server to name. */
  setUrl(url: string): void;
  /** Removes the file, if it still names this process. */
  release(): void;
}

/**
 * Takes `stateDir` for this process (made if missing), or throws StateDirBusyError naming the live
 * server that holds it. Synchronous and before any other start-up work, so nothing of the state
 * directory is touched by a second server.
 */
export function lockStateDir(stateDir: string): StateDirLock {
  const dir = path.resolve(stateDir);
  try {
    mkdirSync(dir, { recursive: true });
  } catch (err) {
    throw new Error(
      `the state directory ${dir} cannot be made (${(err as Error).message}): ` +
        `give --state-dir a folder this user can write`,
      { cause: err },
    );
  }
  const file = path.join(dir, LOCK_FILE);
  const me: StateDirOwner = {
    ...(identify(process.pid) ?? { pid: process.pid, startTicks: null, bootId: null }),
    url: null,
    startedAt: new Date().toISOString(),
  };
  const mine = (o: StateDirOwner | null) =>
    o !== null && o.pid === me.pid && o.startTicks === me.startTicks && o.bootId === me.bootId;

  // Written whole to a file of our own, then linked into place: link(2) fails if the name
  // exists, so of two servers one creates it, and nobody ever reads half a record.
  const tmp = `${file}.${process.pid}.tmp`;
  writeFileSync(tmp, JSON.stringify(me) + '\n', { mode: 0o644 });
  try {
    for (let tries = 0; ; tries++) {
      try {
        linkSync(tmp, file);
        break;
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      }
      const owner = readOwner(file);
      if (mine(owner)) break;
      if (owner !== null && isSameProcess(owner)) throw new StateDirBusyError(dir, owner);
      // Its owner is gone (killed, or its machine rebooted), or it is not a record of ours.
      if (tries === 2) throw new Error(`${file}: could not take it (other servers kept taking it at the same time)`);
      try {
        unlinkSync(file);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
      }
    }
  } finally {
    unlinkSync(tmp);
  }

  let current = me;
  return {
    stateDir: dir,
    setUrl(url) {
      current = { ...current, url };
      // Written whole then renamed: a second server never reads half a record.
      const tmp = `${file}.${process.pid}.tmp`;
      writeFileSync(tmp, JSON.stringify(current) + '\n', { mode: 0o644 });
      renameSync(tmp, file);
    },
    release() {
      if (!mine(readOwner(file))) return;
      try {
        unlinkSync(file);
      } catch {
        // Gone already: nothing to release.
      }
    },
  };
}

/** The owner a lock file names, or null when it is missing, torn or not ours to read. */
export function readOwner(file: string): StateDirOwner | null {
  try {
    const o = JSON.parse(readFileSync(file, 'utf8')) as Partial<StateDirOwner>;
    if (typeof o.pid !== 'number' || !Number.isInteger(o.pid) || o.pid <= 0) return null;
    return {
      pid: o.pid,
      startTicks: o.startTicks ?? null,
      bootId: o.bootId ?? null,
      url: o.url ?? null,
      startedAt: o.startedAt ?? '',
    };
  } catch {
    return null;
  }
}
