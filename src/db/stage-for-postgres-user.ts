import { createHash } from 'node:crypto';
import { chmod, chown, cp, mkdir, mkdtemp, readdir, rename, rm, stat } from 'node:fs/promises';
import path from 'node:path';
import { binariesIn, linkSharedLibraries, type PostgresBinaries } from './postgres-binaries.js';
import { userCan, type Ids } from './postgres-user.js';

/**
 * As root, Leoflow keeps here what the `postgres` user must reach and cannot reach where the user
 * put the project: a root-owned, world-readable copy of the binaries per Postgres version, and a
 * data folder owned by `postgres` per state directory.
 */
export const ROOT_STAGING_DIR = '/var/lib/leoflow';

/** Where the embedded Postgres's binaries and data are, once the user it runs as can reach them. */
export interface PostgresPlacement {
  binaries: PostgresBinaries;
  /** The folder that holds `pgdata/` and the password file. */
  home: string;
  /** What was moved out of the user's way, for one log line; empty when nothing was. */
  moved: { what: 'binaries' | 'data'; unreachable: string; to: string }[];
}

/**
 * A project cloned into a closed home folder (`/root` is mode 700) hides both its
 * `node_modules` and its `.leoflow` from the `postgres` user. Rather than make the user open
 * their home, put each where that user can reach it; a restart finds the same places again.
 */
export async function placeForPostgresUser(opts: {
  binaries: PostgresBinaries;
  stateDir: string;
  ids: Ids;
  stagingDir?: string;
}): Promise<PostgresPlacement> {
  const { ids, stateDir } = opts;
  const stagingDir = opts.stagingDir ?? ROOT_STAGING_DIR;
  await mkdir(stateDir, { recursive: true });
  if (ids.uid === undefined) return { binaries: opts.binaries, home: stateDir, moved: [] };

  const moved: PostgresPlacement['moved'] = [];
  let binaries = opts.binaries;
  if (!(await canRun(ids, binaries))) {
    binaries = await stageBinaries(binaries, stagingDir);
    if (!(await canRun(ids, binaries))) {
      throw new Error(
        `the embedded Postgres runs as the "postgres" user (Leoflow runs as root), ` +
          `which cannot reach ${binaries.dir} either: ` +
          `make ${stagingDir} and the folders above it searchable (chmod o+x), or set DATABASE_URL`,
      );
    }
    moved.push({ what: 'binaries', unreachable: opts.binaries.dir, to: binaries.dir });
  }

  // Opened for the postgres user as before: a state directory of ours that only lacked o+x.
  await chmod(stateDir, 0o755);
  let home = stateDir;
  if (!(await userCan(ids, ['-x', stateDir]))) {
    home = await stageDataHome(stateDir, stagingDir, ids);
    if (!(await userCan(ids, ['-x', home], ['-w', home]))) {
      throw new Error(
        `the embedded Postgres runs as the "postgres" user (Leoflow runs as root), ` +
          `which cannot reach ${home} either: make ${stagingDir} and the folders above it searchable (chmod o+x), ` +
          `or set DATABASE_URL`,
      );
    }
    moved.push({ what: 'data', unreachable: stateDir, to: home });
  }
  return { binaries, home, moved };
}

async function canRun(ids: Ids, b: PostgresBinaries): Promise<boolean> {
  return userCan(
    ids,
    ['-x', b.initdb],
    ['-x', b.postgres],
    ['-x', path.join(b.dir, 'lib')],
    ['-x', path.join(b.dir, 'share')],
  );
}

/**
 * Copies the binaries to `<stagingDir>/postgres-<version>`, whole or not at all: the copy is made
 * beside it and renamed into place, so a process that sees the folder sees all of it, and two
 * that stage at once both end up using the one that won.
 */
export async function stageBinaries(from: PostgresBinaries, stagingDir: string): Promise<PostgresBinaries> {
  const target = path.join(stagingDir, `postgres-${from.version}`);
  const staged = binariesIn(target, from.version);
  if (await exists(staged.postgres)) return staged;
  await mkdir(stagingDir, { recursive: true, mode: 0o755 });
  const tmp = await mkdtemp(path.join(stagingDir, '.postgres-staging-'));
  try {
    await cp(from.dir, tmp, { recursive: true, verbatimSymlinks: true });
    await linkSharedLibraries(tmp);
    await openToAll(tmp);
    await rename(tmp, target);
  } catch (err) {
    await rm(tmp, { recursive: true, force: true });
    const code = (err as NodeJS.ErrnoException).code;
    if ((code === 'ENOTEMPTY' || code === 'EEXIST') && (await exists(staged.postgres))) return staged;
    throw new Error(`could not copy the embedded Postgres binaries to ${target}: ${(err as Error).message}`, {
      cause: err,
    });
  }
  return staged;
}

/** A folder owned by the postgres user, named after the state directory it stands in for. */
async function stageDataHome(stateDir: string, stagingDir: string, ids: Ids): Promise<string> {
  const hash = createHash('sha256').update(stateDir).digest('hex').slice(0, 12);
  const readable = stateDir
    .replace(/^\/+/, '')
    .replace(/[^A-Za-z0-9._]+/g, '-')
    .slice(-60);
  const data = path.join(stagingDir, 'data');
  await mkdir(data, { recursive: true, mode: 0o755 });
  const home = path.join(data, `${readable}-${hash}`);
  await mkdir(home, { recursive: true, mode: 0o700 });
  await chown(home, ids.uid!, ids.gid!);
  return home;
}

/** Root keeps ownership; everyone may read, and run what was runnable. */
async function openToAll(dir: string): Promise<void> {
  await chmod(dir, 0o755);
  for (const entry of await readdir(dir, { withFileTypes: true, recursive: true })) {
    if (entry.isSymbolicLink()) continue;
    const p = path.join(entry.parentPath, entry.name);
    if (entry.isDirectory()) await chmod(p, 0o755);
    else await chmod(p, (await stat(p)).mode & 0o111 ? 0o755 : 0o644);
  }
}

async function exists(p: string): Promise<boolean> {
  try {
    await stat(p);
    return true;
  } catch {
    return false;
  }
}
