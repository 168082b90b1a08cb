import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../helpers/global-setup.js';
import { cli, startServer, type ServerProcess } from '../helpers/leoflow-process.js';

/**
 * The README quick start, as a new user runs it: `leoflow server --edition lite --dags examples`
 * with no DATABASE_URL, so Lite starts its embedded Postgres in the state directory; then the
 * README's trigger command. A restart keeps every DAG, run and log.
 */

let stateDir: string;
const servers: ServerProcess[] = [];

beforeAll(async () => {
  stateDir = await mkdtemp(path.join(os.tmpdir(), 'leoflow-quickstart-'));
});

afterAll(async () => {
  for (const s of servers) await s.kill();
  await rm(stateDir, { recursive: true, force: true });
});

describe('README quick start (embedded Postgres)', () => {
  it('starts with the examples applied, runs hello, and keeps everything across a restart', async () => {
    const pgPort = String(await freePort());
    const args = ['--edition', 'lite', '--dags', 'examples', '--state-dir', stateDir, '--embedded-pg-port', pgPort];
    const env = { DATABASE_URL: undefined, LEOFLOW_EDITION: undefined };
    const first = await startServer({ args, env, readyTimeoutMs: 60_000 });
    servers.push(first);
    const ready = first.logs.find((l) => typeof l.listen === 'string')!;
    expect(ready.edition).toBe('lite');

    const list = await cli(first.url, ['dag', 'list']);
    expect(list.stdout).toMatch(/^fan_out\s+1\s+5\s/m);
    expect(list.stdout).toMatch(/^hello\s+1\s+2\s/m);

    const run = await cli(first.url, ['run', 'trigger', 'hello', '--wait']);
    expect(run.code, run.stdout + run.stderr).toBe(0);
    expect(run.stdout).toMatch(/^run 1 success in/m);
    expect((await first.stop()).code).toBe(0);

    const second = await startServer({ args, env, readyTimeoutMs: 60_000 });
    servers.push(second);
    const runs = await cli(second.url, ['run', 'list', '-o', 'json']);
    expect(JSON.parse(runs.stdout)).toEqual([expect.objectContaining({ run_id: '1', dag_id: 'hello', state: 'success' })]);
    const logs = await cli(second.url, ['logs', '1', '--task', 'greet']);
    expect(logs.stdout).toMatch(/^\[greet #1\] .+/m);
    // Re-applying the unchanged examples at start-up is a no-op: still version 1.
    expect((await cli(second.url, ['dag', 'list'])).stdout).toMatch(/^hello\s+1\s/m);
    expect((await second.stop()).code).toBe(0);
  });
});
