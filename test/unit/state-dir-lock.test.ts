import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { identify } from '../../src/executors/process/process-identity.js';
import { LOCK_FILE, StateDirBusyError, lockStateDir, readOwner } from '../../src/server/state-dir-lock.js';

/** The state directory's lock: taken, refused while its owner lives, taken over once it is gone. */

const dirs: string[] = [];
const children: number[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
  for (const pid of children.splice(0)) process.kill(pid, 'SIGKILL');
});
const stateDir = () => {
  const d = mkdtempSync(path.join(os.tmpdir(), 'leoflow-lock-'));
  dirs.push(d);
  return path.join(d, 'state');
};

describe('lockStateDir', () => {
  it('makes the folder, records this process and its URL, and removes the file on release', () => {
    const dir = stateDir();
    const lock = lockStateDir(dir);
    const file = path.join(dir, LOCK_FILE);
    expect(readOwner(file)).toMatchObject({ ...identify(process.pid), url: null });
    lock.setUrl('http://127.0.0.1:7070');
    expect(readOwner(file)).toMatchObject({ pid: process.pid, url: 'http://127.0.0.1:7070' });
    lock.release();
    expect(() => readFileSync(file)).toThrow(/ENOENT/);
  });

  it('refuses while another live process holds it, naming its pid and URL', () => {
    const dir = stateDir();
    const other = spawn('sleep', ['30'], { stdio: 'ignore' });
    children.push(other.pid!);
    lockStateDir(dir).release();
    writeFileSync(
      path.join(dir, LOCK_FILE),
      JSON.stringify({ ...identify(other.pid!), url: 'http://127.0.0.1:7070', startedAt: '' }),
    );
    const err = (() => {
      try {
        lockStateDir(dir);
      } catch (e) {
        return e;
      }
      return null;
    })();
    expect(err).toBeInstanceOf(StateDirBusyError);
    expect((err as Error).message).toBe(
      `already running: pid ${other.pid}, http://127.0.0.1:7070 (state directory ${dir}); stop it first, or give this server another --state-dir`,
    );
  });

  it('takes over the file of a dead owner, and of a live process that is not the one recorded (a reused pid)', () => {
    const dir = stateDir();
    lockStateDir(dir).release();
    const file = path.join(dir, LOCK_FILE);
    // pid 1 lives, but did not start at that tick (later than now): the pid was reused.
    writeFileSync(
      file,
      JSON.stringify({ ...identify(1), startTicks: '999999999999', url: 'http://127.0.0.1:7070', startedAt: '' }),
    );
    lockStateDir(dir);
    expect(readOwner(file)).toMatchObject({ pid: process.pid, url: null });
    // Torn or foreign content: its writer is gone.
    writeFileSync(file, '{"pid": ');
    lockStateDir(dir).release();
  });
});
