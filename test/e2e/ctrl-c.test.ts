import { chmod, mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../helpers/global-setup.js';
import { cli, startServer, waitFor, type ServerProcess } from '../helpers/leoflow-process.js';

/**
 * Ctrl-C at a terminal sends SIGINT to the whole foreground process group: the server, and any
 * child in its group. The embedded Postgres must not be among them, or it would stop before the
 * server has recorded the task it lets finish.
 */

let dir: string;
const servers: ServerProcess[] = [];

beforeAll(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'leoflow-ctrlc-'));
  // As root, the embedded Postgres runs as the postgres user, which must reach the state dir.
  await chmod(dir, 0o755);
});
afterAll(async () => {
  for (const s of servers) await s.kill();
  await rm(dir, { recursive: true, force: true });
});

describe('Ctrl-C on the Lite server (embedded Postgres)', () => {
  it('lets the running task finish and records it before Postgres stops', async () => {
    const dags = path.join(dir, 'dags');
    await mkdir(dags);
    // It runs until the test says so: a slow machine's polling cannot miss it running.
    const go = path.join(dir, 'go');
    await writeFile(
      path.join(dags, 'slow.yaml'),
      `dag_id: slow\ntasks:\n  - id: work\n    command: ["sh", "-c", "echo begin; while [ ! -e ${go} ]; do sleep 0.05; done; sleep 0.5; echo end"]\n`,
    );
    const args = [
      '--dags',
      dags,
      '--state-dir',
      path.join(dir, 'state'),
      '--embedded-pg-port',
      String(await freePort()),
    ];
    const env = { DATABASE_URL: undefined };
    const first = await startServer({ args, env, ownProcessGroup: true, readyTimeoutMs: 60_000 });
    servers.push(first);
    const t = await cli(first.url, ['run', 'trigger', 'slow', '-o', 'json']);
    const runId = JSON.parse(t.stdout).run_id as string;
    await waitFor('work running', async () => {
      const r = await cli(first.url, ['run', 'show', runId, '-o', 'json']);
      return JSON.parse(r.stdout).task_instances[0].state === 'running';
    });
    process.kill(-first.child.pid!, 'SIGINT'); // the whole group, as a terminal does
    await writeFile(go, '');
    const exit = await Promise.race([first.exited, new Promise<null>((r) => setTimeout(() => r(null), 30_000))]);
    expect(exit, 'the server did not stop within 30 s of Ctrl-C').not.toBeNull();
    expect(exit!.code).toBe(0);

    const second = await startServer({ args, env, readyTimeoutMs: 60_000 });
    servers.push(second);
    const shown = JSON.parse((await cli(second.url, ['run', 'show', runId, '-o', 'json'])).stdout);
    expect(shown.task_instances[0]).toMatchObject({ state: 'success', try_number: 1, exit_code: 0 });
    expect((await cli(second.url, ['logs', runId])).stdout).toMatch(/^\[work #1\] end$/m);
    expect((await second.stop()).code).toBe(0);
  });
});
