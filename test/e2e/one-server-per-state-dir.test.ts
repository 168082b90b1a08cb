import { spawn } from 'node:child_process';
import net from 'node:net';
import { chmod, readFile, symlink, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../helpers/global-setup.js';
import {
  BIN,
  ROOT,
  cli,
  runCommand,
  scratchDir,
  startServer,
  stopLeftEmbeddedPostgres,
  waitFor,
  type ServerProcess,
} from '../helpers/leoflow-process.js';
import { startTcpProxy } from '../helpers/tcp-proxy.js';
import { createTestDatabase, type TestDatabase } from '../helpers/test-database.js';
import { processGone } from '../helpers/process-gone.js';

/**
 * One state directory, one server. A second `npm start` in the same clone refuses before it
 * touches the first's embedded Postgres, naming the first; a Lite server whose Postgres dies
 * starts it again, or exits non-zero with the reason when it cannot; and Ctrl-C ends within the
 * shutdown grace whatever the database does.
 */

const alive = (pid: number) => !processGone(pid);
const postmasterOf = async (dataDir: string) =>
  Number((await readFile(path.join(dataDir, 'postmaster.pid'), 'utf8')).split('\n')[0]);

/** Process groups this file started (npm and its children), killed whole at the end. */
const groups = new Set<number>();
const servers: ServerProcess[] = [];
afterEach(async () => {
  for (const s of servers.splice(0)) await s.kill();
  stopLeftEmbeddedPostgres();
});
afterAll(() => {
  for (const g of groups) {
    try {
      process.kill(-g, 'SIGKILL');
    } catch {
      // gone
    }
  }
});

/**
 * A clone as a user has it, in a folder of its own: `npm start` runs there, so its state
 * directory is the clone's `.leoflow`. The build and dependencies are this repository's.
 */
async function scratchClone(): Promise<string> {
  const clone = scratchDir('leoflow-clone-');
  // As root, the embedded Postgres runs as the postgres user, which must reach the state dir.
  await chmod(clone, 0o755);
  for (const f of ['bin', 'examples', 'package.json']) await symlink(path.join(ROOT, f), path.join(clone, f));
  return clone;
}

/** `npm start` in `clone`, in a process group of its own (as at a terminal), resolved once ready. */
async function npmStart(
  clone: string,
  env: Record<string, string | undefined>,
): Promise<{ pid: number; group: number; url: string; output(): string; exited: Promise<unknown> }> {
  const child = spawn('npm', ['start'], {
    cwd: clone,
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
  });
  groups.add(child.pid!);
  let out = '';
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  const ready = await new Promise<Record<string, unknown>>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`npm start not ready in 90 s:\n${out}`)), 90_000);
    const onData = (c: string) => {
      out += c;
      for (const line of out.split('\n')) {
        if (!line.includes('"listen"') || !line.includes(' ready on ')) continue;
        clearTimeout(timer);
        resolve(JSON.parse(line) as Record<string, unknown>);
      }
    };
    child.stdout!.setEncoding('utf8').on('data', onData);
    child.stderr!.setEncoding('utf8').on('data', onData);
    void exited.then((code) => reject(new Error(`npm start exited (${code}) before ready:\n${out}`)));
  });
  return {
    pid: ready.pid as number,
    group: child.pid!,
    url: `http://${String(ready.listen)}`,
    output: () => out,
    exited,
  };
}

describe('a second npm start in the same clone', () => {
  it('refuses before touching Postgres, naming the first, which keeps working', async () => {
    const clone = await scratchClone();
    // The shipped defaults, but on ports of this test's own: the machine runs other servers.
    const apiPort = await freePort();
    const env = {
      DATABASE_URL: undefined,
      LEOFLOW_EDITION: undefined,
      LEOFLOW_LISTEN: `127.0.0.1:${apiPort}`,
      LEOFLOW_METRICS_LISTEN: `127.0.0.1:${await freePort()}`,
      LEOFLOW_EMBEDDED_PG_PORT: String(await freePort()),
      LEOFLOW_LOG_FORMAT: 'json',
    };
    const first = await npmStart(clone, env);
    const dataDir = path.join(clone, '.leoflow', 'pgdata');
    const postmaster = await postmasterOf(dataDir);

    const second = await runCommand('npm', ['start'], { cwd: clone, env, timeoutMs: 90_000 });
    expect(second.code).not.toBe(0);
    expect(second.stderr).toContain(
      `leoflow server: already running: pid ${first.pid}, http://127.0.0.1:${apiPort} (state directory ${path.join(clone, '.leoflow')})`,
    );
    // It never reached the first's Postgres: no adoption, no start of its own.
    expect(second.stdout + second.stderr).not.toMatch(/adopting|embedded Postgres/);

    expect(alive(first.pid)).toBe(true);
    expect(await postmasterOf(dataDir)).toBe(postmaster);
    expect(alive(postmaster)).toBe(true);
    const run = await cli(first.url, ['run', 'trigger', 'hello', '--wait'], { timeoutMs: 60_000 });
    expect(run.code, run.stdout + run.stderr).toBe(0);
    expect(run.stdout).toMatch(/^run 1 success in/m);
    expect(first.output()).not.toMatch(/campaign failed/);

    // Ctrl-C at its terminal: it stops, with its Postgres, and a later start takes the clone.
    process.kill(-first.group, 'SIGINT');
    const ended = await Promise.race([
      first.exited.then(() => 'exited'),
      new Promise<'late'>((r) => setTimeout(() => r('late'), 40_000)),
    ]);
    expect(ended).toBe('exited');
    expect(first.output()).toMatch(/"msg":"stopped"/);
    await waitFor('its Postgres stopped', async () => !alive(postmaster), 10_000);
    expect(await readFile(path.join(clone, '.leoflow', 'server.lock'), 'utf8').catch(() => null)).toBeNull();
    groups.delete(first.group);
  });
});

describe('a start that fails after a crash', () => {
  it('leaves the Postgres it adopted running, for the next start to adopt', async () => {
    const stateDir = scratchDir('leoflow-failed-start-');
    await chmod(stateDir, 0o755);
    const args = ['--edition', 'lite', '--state-dir', stateDir, '--embedded-pg-port', String(await freePort())];
    const env = { DATABASE_URL: undefined, LEOFLOW_EDITION: undefined };
    const crashed = await startServer({ args, env, readyTimeoutMs: 90_000 });
    servers.push(crashed);
    const postmaster = await postmasterOf(path.join(stateDir, 'pgdata'));
    await crashed.kill();

    // Its API port is taken: it adopts the Postgres, fails late, and must not stop it.
    const busy = net.createServer();
    await new Promise<void>((r) => busy.listen(0, '127.0.0.1', r));
    const port = (busy.address() as net.AddressInfo).port;
    try {
      const failed = await runCommand(
        process.execPath,
        [BIN, 'server', ...args, '--listen', `127.0.0.1:${port}`, '--metrics-listen', 'off'],
        { env, timeoutMs: 90_000 },
      );
      expect(failed.code).toBe(1);
      expect(failed.stderr).toContain(
        `could not start: --listen 127.0.0.1:${port}: the address is in use by another process`,
      );
    } finally {
      busy.close();
    }
    expect(alive(postmaster)).toBe(true);

    const next = await startServer({ args, env, readyTimeoutMs: 90_000 });
    servers.push(next);
    expect(
      next.logs.some(
        (l) =>
          l.msg === 'adopting an embedded Postgres left running by a previous Leoflow' && l.postmaster === postmaster,
      ),
    ).toBe(true);
    expect((await next.stop()).code).toBe(0);
    await waitFor('its Postgres stopped', async () => !alive(postmaster), 10_000);
  });
});

describe('a Lite server whose embedded Postgres dies', () => {
  const start = async () => {
    const stateDir = scratchDir('leoflow-pg-dies-');
    await chmod(stateDir, 0o755);
    const s = await startServer({
      args: [
        '--edition',
        'lite',
        '--dags',
        'examples',
        '--state-dir',
        stateDir,
        '--embedded-pg-port',
        String(await freePort()),
      ],
      env: { DATABASE_URL: undefined, LEOFLOW_EDITION: undefined },
      readyTimeoutMs: 90_000,
    });
    servers.push(s);
    return { s, dataDir: path.join(stateDir, 'pgdata') };
  };

  it('starts it again when it is SIGKILLed, and keeps running runs', async () => {
    const { s, dataDir } = await start();
    const postmaster = await postmasterOf(dataDir);
    process.kill(postmaster, 'SIGKILL');
    await waitFor(
      'Postgres running again',
      async () => s.logs.some((l) => String(l.msg).startsWith('embedded Postgres running again')),
      60_000,
    );
    expect(
      s.logs.find((l) => String(l.msg).startsWith('embedded Postgres exited while the server runs')),
    ).toMatchObject({ postmaster, how: expect.stringMatching(/^killed by SIGKILL/) });
    const run = await cli(s.url, ['run', 'trigger', 'hello', '--wait'], { timeoutMs: 60_000 });
    expect(run.code, run.stdout + run.stderr).toBe(0);
    expect((await s.stop()).code).toBe(0);
  });

  it('exits non-zero with the reason when it cannot be started again', async () => {
    const { s, dataDir } = await start();
    // Postgres refuses a data directory others may read: every start from now on fails.
    await chmod(dataDir, 0o777);
    process.kill(await postmasterOf(dataDir), 'SIGKILL');
    const exit = await Promise.race([s.exited, new Promise<null>((r) => setTimeout(() => r(null), 90_000))]);
    expect(exit, 'the server still runs 90 s after its Postgres died for good').not.toBeNull();
    expect(exit!.code).toBe(1);
    expect(s.stderr()).toMatch(
      /^leoflow server: stopping: the embedded Postgres \(data directory .*pgdata\) stopped and could not be kept running: 3 restarts within 10 min; last: .*invalid permissions/m,
    );
    expect(s.logs.filter((l) => l.msg === 'campaign failed; retrying').length).toBeLessThan(60);
  });
});

describe('Ctrl-C with the database gone', () => {
  let db: TestDatabase;
  beforeAll(async () => {
    db = await createTestDatabase();
  });
  afterAll(async () => db?.drop());

  it('ends within the shutdown grace, a task running', async () => {
    const target = new URL(db.url);
    const proxy = await startTcpProxy({ host: target.hostname, port: Number(target.port) });
    const viaProxy = new URL(db.url);
    viaProxy.port = String(proxy.port);
    const dags = scratchDir('leoflow-ctrlc-dags-');
    await writeFile(path.join(dags, 'long.yaml'), 'dag_id: long\ntasks:\n  - id: work\n    command: ["sleep", "60"]\n');
    const graceS = 3;
    const s = await startServer({
      env: { DATABASE_URL: viaProxy.toString() },
      args: ['--edition', 'lite', '--dags', dags, '--shutdown-grace', `${graceS}s`, '--kill-grace', '1s'],
      ownProcessGroup: true,
    });
    servers.push(s);
    const t = JSON.parse((await cli(s.url, ['run', 'trigger', 'long', '-o', 'json'])).stdout) as { run_id: string };
    await waitFor(
      'work running',
      async () =>
        JSON.parse((await cli(s.url, ['run', 'show', t.run_id, '-o', 'json'])).stdout).task_instances[0].state ===
        'running',
    );

    await proxy.close(); // the database is gone: every connection cut, every new one refused
    const began = Date.now();
    process.kill(-s.child.pid!, 'SIGINT');
    const exit = await Promise.race([s.exited, new Promise<null>((r) => setTimeout(() => r(null), 60_000))]);
    const tookMs = Date.now() - began;
    expect(exit, 'still running 60 s after Ctrl-C').not.toBeNull();
    // The grace for the task, its kill grace, and a moment for what needs no database.
    expect(tookMs).toBeLessThan((graceS + 1 + 2) * 1000);
    expect(exit!.code).toBe(0);
  });
});
