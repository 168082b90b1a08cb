import { execFileSync } from 'node:child_process';
import { chmod, mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { assertRunnable } from '../../src/db/embedded-postgres.js';

/**
 * As root, the embedded Postgres runs as the `postgres` user: a project checked out under a folder
 * closed to that user (mode 700, as `mktemp -d` makes them) hides the Postgres binaries from it.
 * Leoflow must say so, not let initdb fail with an empty message.
 */
const asRoot = process.getuid?.() === 0;
let ids: { uid: number; gid: number } | null = null;
try {
  ids = { uid: Number(execFileSync('id', ['-u', 'postgres']).toString()), gid: Number(execFileSync('id', ['-g', 'postgres']).toString()) };
} catch {
  ids = null; // no postgres user: the global setup creates one when it starts the embedded server
}

describe.skipIf(!asRoot || ids === null)('embedded Postgres binaries the postgres user cannot reach', () => {
  let dir: string;
  let file: string;
  beforeAll(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'leoflow-closed-'));
    file = path.join(dir, 'initdb');
    await writeFile(file, '#!/bin/sh\nexit 0\n', { mode: 0o755 });
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('are named, with what to do, when a folder above them is closed', async () => {
    await chmod(dir, 0o700);
    await expect(assertRunnable(file, ids!)).rejects.toThrow(/"postgres" user .* cannot run .*leoflow-closed-.*\/initdb: make the folders above the project searchable/);
  });

  it('pass when the folders are open', async () => {
    await chmod(dir, 0o755);
    await expect(assertRunnable(file, ids!)).resolves.toBeUndefined();
  });
});
