import { randomBytes } from 'node:crypto';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createClients } from '../../src/cli/client.js';
import { freePort } from '../helpers/global-setup.js';
import { serverLauncher, waitFor, type ServerProcess } from '../helpers/leoflow-process.js';
import {
  generateStubs,
  killPythonProcesses,
  PY_DIR,
  startPython,
  stopPython,
  type PythonProcess,
} from '../helpers/python-process.js';
import { createTestDatabase, type TestDatabase } from '../helpers/test-database.js';
import { gracefulStopFlags } from '../helpers/fault-flags.js';

/**
 * The Python agent (examples/python) among several control-plane replicas on one database, as
 * the TypeScript agent's failover is tested (test/fault/graceful-stop.test.ts): told to reconnect
 * by a replica that stops gracefully, it moves to its next address at once, with its running
 * task, which ends there as try 1; an address that is down costs it one try; and its reconnect
 * backoff stays within Welcome.max_reconnect_backoff, so it is back soon after an outage.
 */

const THRESHOLD_MS = 8000; // Welcome.max_reconnect_backoff is a quarter: 2 s
const FLAGS = gracefulStopFlags(THRESHOLD_MS);

let db: TestDatabase;
let tmp: string;
let stubs: string;
const servers: ServerProcess[] = [];

beforeAll(async () => {
  tmp = await mkdtemp(path.join(os.tmpdir(), 'leoflow-python-failover-'));
  stubs = path.join(tmp, 'stubs');
  await generateStubs(stubs);
  db = await createTestDatabase();
}, 90_000);

afterEach(async () => {
  await killPythonProcesses();
  for (const s of servers.splice(0)) await s.kill();
});

afterAll(async () => {
  await killPythonProcesses();
  for (const s of servers.splice(0)) await s.kill();
  await db?.drop();
  if (tmp) await rm(tmp, { recursive: true, force: true });
});

const startReplica = serverLauncher({ databaseUrl: () => db.url, args: FLAGS, servers });

/** host:port of a replica, as the Python side takes it. */
const hostOf = (s: ServerProcess): string => new URL(s.url).host;

/** An agent labelled with its own id, so each test's tasks go to its own agent (an agent of an
 *  earlier test, whose replica was killed, may still look connected for a while). */
function startAgent(id: string, serverArgs: string[]): PythonProcess {
  return startPython(
    stubs,
    [
      `${PY_DIR}/leoflow_agent.py`,
      ...serverArgs,
      '--id',
      id,
      '--labels',
      `lang=python,agent=${id}`,
      '--slots',
      '1',
      '--kill-grace',
      '1',
    ],
    90_000,
  );
}

/** Resolves with the time the agent's log first shows `text`; throws with its log if it never does. */
async function seen(agent: PythonProcess, text: string | RegExp, timeoutMs: number): Promise<number> {
  const has = () => (typeof text === 'string' ? agent.stderr.includes(text) : text.test(agent.stderr));
  await waitFor(
    `the agent to log ${String(text)}`,
    async () => has() || agent.child.exitCode !== null,
    timeoutMs,
    20,
  ).catch((err: Error) => {
    throw new Error(`${err.message}; the agent said:\n${agent.stderr}`);
  });
  if (!has())
    throw new Error(`the agent exited (${agent.child.exitCode}) before logging ${String(text)}:\n${agent.stderr}`);
  return Date.now();
}

interface RunJson {
  run: { state: string };
  task_instances: { task_id: string; state: string; try_number: number; agent_id?: string; exit_code?: number }[];
}

/** Runs trigger_and_wait.py on a one-task DAG placed on the agent `agentId`; resolves with its result. */
async function triggerAndWait(
  server: ServerProcess,
  agentId: string,
  dagId: string,
  command: string[],
): Promise<{ code: number | null; stdout: string; result: RunJson }> {
  const file = path.join(tmp, `${dagId}.json`);
  const out = path.join(tmp, `${dagId}.result.json`);
  await writeFile(
    file,
    JSON.stringify({
      dag_id: dagId,
      tasks: [{ id: 't', executor: 'agents', placement: { labels: { agent: agentId } }, command, retries: 0 }],
    }),
  );
  const p = startPython(
    stubs,
    [`${PY_DIR}/trigger_and_wait.py`, '--server', hostOf(server), '--timeout', '60', '--logs', '--json-out', out, file],
    80_000,
  );
  const code = await p.exited;
  try {
    return { code, stdout: p.stdout, result: JSON.parse(await readFile(out, 'utf8')) as RunJson };
  } catch {
    throw new Error(`trigger_and_wait.py wrote no result (exit ${code}):\n${p.stdout}\n${p.stderr}`);
  }
}

describe('a Python agent among several control-plane replicas', () => {
  it('told to reconnect by a replica stopping gracefully, moves to the next address at once and its running task ends there as try 1', async () => {
    const a = await startReplica(['--replica-id', 'replica-a']);
    await waitFor(
      'replica-a to lead',
      async () => (await createClients(a.url).cluster.getLeader({})).leaderId === 'replica-a',
    );
    const b = await startReplica(['--replica-id', 'replica-b']);
    const id = `py-move-${randomBytes(3).toString('hex')}`;
    // Repeated --server: the first address first.
    const agent = startAgent(id, ['--server', hostOf(a), '--server', hostOf(b)]);
    await seen(agent, 'welcomed by replica replica-a', 30_000);
    expect(agent.stderr).toMatch(/reconnect backoff at most 2\.00s/);

    // Driven through replica-b, which stays up; the task outlasts the move by seconds.
    const running = triggerAndWait(b, id, 'py_move', ['sh', '-c', 'echo before; sleep 4; echo after']);
    await seen(agent, /t ti \d+ try 1: started pid/, 30_000);

    const stopped = a.stop(20_000);
    const backAt = await seen(agent, 'welcomed by replica replica-b', 15_000);
    expect(await stopped).toEqual({ code: 0, signal: null });
    const told = a.logs.find((r) => String(r.msg) === `told agent ${id} to reconnect elsewhere`);
    expect(told, 'replica-a told the agent to reconnect').toBeDefined();
    // At once: well before replica-a gives up waiting and closes the stream (5 s), as it must for
    // an agent that ignores Reconnect, and with no backoff (up to 2 s) on the way.
    const movedMs = backAt - Number(told!.time);
    expect(movedMs).toBeLessThan(3000);
    expect(a.logs.map((r) => r.msg)).not.toContain(
      'agents still connected after being told to reconnect elsewhere: their streams are closed',
    );
    const after = agent.stderr.slice(
      agent.stderr.indexOf('told to reconnect elsewhere: replica replica-a is shutting down'),
    );
    expect(after, agent.stderr).toMatch(
      /^told to reconnect elsewhere[^]*reconnecting to \S+ now \(1 attempts held\)[^]*welcomed by replica replica-b/,
    );
    expect(after.slice(0, after.indexOf('welcomed by replica replica-b'))).not.toMatch(/reconnecting to \S+ in /);

    // Resumed on replica-b: it ends there, once, as try 1, with all its output.
    const r = await running;
    expect(r.code, `${r.stdout}\nagent:\n${agent.stderr}`).toBe(0);
    expect(r.result.task_instances.map((t) => [t.task_id, t.state, t.try_number, t.agent_id, t.exit_code])).toEqual([
      ['t', 'TASK_STATE_SUCCESS', 1, id, 0],
    ]);
    expect(r.stdout).toMatch(/^\[t #1 stdout\] before\n\[t #1 stdout\] after$/m);
    expect(await db.sql`select ti_id from events where payload->>'reason' = 'agent_lost'`).toEqual([]);
    console.log(`python agent moved from replica-a to replica-b ${movedMs} ms after being told to`);
  });

  it('given one address, goes where the Reconnect of its stopping replica says, with its running task', async () => {
    const a = await startReplica(['--replica-id', 'replica-a']);
    await waitFor(
      'replica-a to lead',
      async () => (await createClients(a.url).cluster.getLeader({})).leaderId === 'replica-a',
    );
    const id = `py-one-${randomBytes(3).toString('hex')}`;
    const agent = startAgent(id, ['--server', hostOf(a)]);
    await seen(agent, 'welcomed by replica replica-a', 30_000);
    // Started after the agent's Welcome: only the Reconnect can tell the agent where it is.
    const b = await startReplica(['--replica-id', 'replica-b']);
    const running = triggerAndWait(b, id, 'py_one', ['sh', '-c', 'echo before; sleep 3; echo after']);
    await seen(agent, /t ti \d+ try 1: started pid/, 30_000);

    const stopped = a.stop(20_000);
    await seen(agent, 'welcomed by replica replica-b', 15_000);
    expect(await stopped).toEqual({ code: 0, signal: null });
    expect(agent.stderr).toContain(`reconnecting to ${hostOf(b)} now (1 attempts held)`);
    const r = await running;
    expect(r.code, `${r.stdout}\nagent:\n${agent.stderr}`).toBe(0);
    expect(r.result.task_instances.map((t) => [t.task_id, t.state, t.try_number, t.agent_id, t.exit_code])).toEqual([
      ['t', 'TASK_STATE_SUCCESS', 1, id, 0],
    ]);
    expect(r.stdout).toMatch(/^\[t #1 stdout\] before\n\[t #1 stdout\] after$/m);
  });

  it('skips an address that is down: one failed try, then the next address, where it runs a task', async () => {
    const b = await startReplica(['--replica-id', 'replica-b']);
    const dead = `127.0.0.1:${await freePort()}`; // nothing listens there
    const id = `py-skip-${randomBytes(3).toString('hex')}`;
    // Addresses separated by a comma: the dead one first.
    const startedAt = Date.now();
    const agent = startAgent(id, ['--server', `${dead},${hostOf(b)}`]);
    const backAt = await seen(agent, 'welcomed by replica replica-b', 15_000);
    // Python's start and one refused connection, then a first backoff of at most 0.1 s.
    expect(backAt - startedAt).toBeLessThan(5000);
    const log = agent.stderr;
    expect(log.indexOf(`connecting to ${dead}`), log).toBeGreaterThanOrEqual(0);
    expect(log.indexOf(`stream error from ${dead}: UNAVAILABLE`), log).toBeGreaterThan(
      log.indexOf(`connecting to ${dead}`),
    );
    expect(log.indexOf(`welcomed by replica replica-b at ${hostOf(b)}`), log).toBeGreaterThan(
      log.indexOf(`stream error from ${dead}`),
    );

    const r = await triggerAndWait(b, id, 'py_skip', ['sh', '-c', 'echo ran']);
    expect(r.code, `${r.stdout}\nagent:\n${agent.stderr}`).toBe(0);
    expect(r.result.task_instances.map((t) => [t.task_id, t.state, t.agent_id])).toEqual([
      ['t', 'TASK_STATE_SUCCESS', id],
    ]);
    await stopPython(agent);
  });

  it('keeps its reconnect backoff within Welcome.max_reconnect_backoff: back soon after its replica returns from an outage', async () => {
    // A 2 s heartbeat threshold: the bound is a quarter, 0.5 s.
    const bounded = ['--heartbeat-interval', '500ms', '--heartbeat-threshold', '2000ms'];
    const c = await startReplica(['--replica-id', 'replica-c', ...bounded]);
    const id = `py-bound-${randomBytes(3).toString('hex')}`;
    const agent = startAgent(id, ['--server', hostOf(c)]);
    await seen(agent, 'welcomed by replica replica-c', 30_000);

    // An outage of several seconds: unbounded, the delays would have grown past 3 s by its end.
    await c.kill();
    const cutAt = agent.stderr.length;
    await new Promise((r) => setTimeout(r, 4000));
    const again = await startReplica(['--replica-id', 'replica-c2', '--listen', hostOf(c), ...bounded]);
    const readyAt = Date.now();
    const backAt = await seen(agent, 'welcomed by replica replica-c2', 10_000);
    const backMs = backAt - readyAt;

    const delays = [...agent.stderr.slice(cutAt).matchAll(/reconnecting (?:to \S+ )?in (\d+\.\d+)s/g)].map((m) =>
      Number(m[1]),
    );
    expect(Math.max(...delays), agent.stderr).toBeLessThanOrEqual(0.5);
    expect(delays.length, agent.stderr).toBeGreaterThanOrEqual(5);
    expect(agent.stderr).toMatch(
      /welcomed by replica replica-c at \S+ \(keepalive every 0\.5s, reconnect backoff at most 0\.50s\)/,
    );
    // At most one bounded delay after the replica is ready, plus the connection itself.
    expect(backMs).toBeLessThan(1500);
    expect(new URL(again.url).host).toBe(hostOf(c));
    await stopPython(agent);
    console.log(
      `python agent back ${backMs} ms after its replica; ${delays.length} delays, the longest ${Math.max(...delays)} s`,
    );
  });
});
