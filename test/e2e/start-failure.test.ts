import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BIN, runCommand } from '../helpers/leoflow-process.js';

/**
 * A server that cannot start says why in one plain line and exits non-zero, whether its output
 * goes to a terminal or to a pipe (CI, systemd, a script), and whatever the log format.
 */

/** A new user's environment: no database URL, no edition of ours. */
const run = (cmd: string, args: string[]) =>
  runCommand(cmd, args, { timeoutMs: 30_000, env: { DATABASE_URL: undefined, LEOFLOW_EDITION: undefined } });

// A state directory that cannot be made: its parent is a file.
let tmp: string;
let stateDir: string;
beforeAll(async () => {
  tmp = await mkdtemp(path.join(os.tmpdir(), 'leoflow-start-failure-'));
  await writeFile(path.join(tmp, 'a-file'), '');
  stateDir = path.join(tmp, 'a-file', 'state');
});
afterAll(async () => rm(tmp, { recursive: true, force: true }));

const serverArgs = (format: string) => [
  BIN,
  'server',
  '--listen',
  '127.0.0.1:0',
  '--metrics-listen',
  'off',
  '--log-format',
  format,
  '--state-dir',
  stateDir,
];
const LINE =
  /^leoflow server: could not start: the state directory .*\/a-file\/state cannot be made \(ENOTDIR: not a directory, mkdir '.*\/a-file\/state'\): give --state-dir a folder this user can write$/;

describe('a server that cannot start', () => {
  it.each(['json', 'pretty'])('prints one readable line to a pipe and exits 1 (log format %s)', async (format) => {
    const r = await run(process.execPath, serverArgs(format));
    expect(r.code).toBe(1);
    expect(r.stderr.split('\n')).toEqual([expect.stringMatching(LINE), '']);
    expect(r.stdout).not.toMatch(/could not start|"stack"|    at /);
  });

  it('prints the same line at a terminal', async () => {
    // script(1) gives the server a pseudo-terminal, as an interactive shell would.
    const command = [process.execPath, ...serverArgs('pretty')].map((a) => `'${a}'`).join(' ');
    const r = await run('script', ['-qec', command, '/dev/null']);
    expect(r.code).toBe(1);
    const lines = r.stdout.split(/\r?\n/).filter((l) => l.trim() !== '');
    expect(lines).toEqual([expect.stringMatching(LINE)]);
  });
});
