import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createClients, type Clients } from '../../src/cli/client.js';
import {
  cli,
  startAgent,
  startServer,
  waitFor,
  type AgentProcess,
  type ServerProcess,
} from '../helpers/leoflow-process.js';
import { isAlive, killGroupOf } from '../helpers/process-group.js';
import { runEnds } from '../helpers/run-ends.js';
import { createTestDatabase, type TestDatabase } from '../helpers/test-database.js';

/**
 * An agent SIGKILLed while its task runs, and started again with the same id and state directory:
 * it re-attaches to the task's shim, so the task ends once, as the same try, with its whole log.
 * Each task appends "start TRY PID" and "end TRY" to a ledger and waits for a `go` file. The
 * heartbeat threshold is long: a restarted agent that came back after it would rightly find its
 * attempt retried elsewhere (and stop it), which is not what this test is about.
 */

let db: TestDatabase;
let server: ServerProcess;
let api: Clients;
let tmp: string;
let agents: AgentProcess[] = [];
const taskPids = new Set<number>();

beforeAll(async () => {
  db = await createTestDatabase();
  tmp = await mkdtemp(path.join(os.tmpdir(), 'leoflow-agent-restart-'));
  server = await startServer({
    env: { DATABASE_URL: db.url },
    args: ['--heartbeat-interval', '300ms', '--heartbeat-threshold', '30s', '--tick-interval', '200ms'],
  });
  api = createClients(server.url);
});
afterEach(async () => {
  await Promise.all(agents.map((a) => a.stop(5000)));
  agents = [];
  for (const pid of taskPids) killGroupOf(pid);
  taskPids.clear();
});
afterAll(async () => {
  await server?.stop();
  await db?.drop();
  await rm(tmp, { recursive: true, force: true });
});

async function agent(id: string, stateDir: string): Promise<AgentProcess> {
  const a = startAgent(server.url, ['--id', id, '--labels', `zone=${id}`, '--state-dir', stateDir]);
  agents.push(a);
  await waitFor(
    `agent ${id} connected`,
    async () => (await api.cluster.listAgents({})).agents.some((x) => x.agentId === id && x.connected),
    20_000,
  );
  return a;
}

async function setUp(name: string, retries: number) {
  const ledger = path.join(tmp, `${name}.ledger`);
  const go = path.join(tmp, `${name}.go`);
  const stateDir = path.join(tmp, `${name}.state`);
  const script = [
    `echo "start $LEOFLOW_TRY_NUMBER $$" >> ${ledger}`,
    'echo line-before',
    `while [ ! -e ${go} ]; do sleep 0.05; done`,
    'echo line-after',
    'echo to-stderr >&2',
    `echo "end $LEOFLOW_TRY_NUMBER" >> ${ledger}`,
    // The task's last act: when it ends, in ms, by this machine's clock.
    `date +%s%3N > ${ledger}.end`,
  ].join('; ');
  const file = path.join(tmp, `${name}.yaml`);
  await writeFile(
    file,
    [
      `dag_id: ${name}`,
      'tasks:',
      '  - id: work',
      '    executor: agents',
      `    placement: { labels: { zone: ${name} } }`,
      `    command: ["sh", "-c", ${JSON.stringify(script)}]`,
      `    retries: ${retries}`,
      '    retry_delay: 100ms',
      '',
    ].join('\n'),
  );
  const applied = await cli(server.url, ['dag', 'apply', file]);
  expect(applied.code, applied.stderr).toBe(0);
  const first = await agent(name, stateDir);
  const runId = (await api.workflow.triggerRun({ dagId: name })).run!.runId;
  const lines = async () => (await readFile(ledger, 'utf8').catch(() => '')).split('\n').filter((l) => l !== '');
  const started = await waitFor(
    'try 1 started',
    async () => (await lines()).find((l) => l.startsWith('start 1 ')) ?? null,
  );
  const pid = Number(started.split(' ')[2]);
  taskPids.add(pid);
  await waitFor('try 1 running in the database', async () => (await ti(runId))?.state === 'running');
  return { name, go, stateDir, first, runId, pid, lines, ledger };
}

async function ti(runId: string) {
  const [row] = await db.sql<{ state: string; try_number: number; exit_code: number | null }[]>`
    select state, try_number, exit_code from task_instances where run_id = ${runId}`;
  return row;
}

async function outputOf(runId: string): Promise<string[]> {
  const rows = await db.sql<{ try_number: number; stream: string; line: string }[]>`
    select l.try_number, l.stream, l.line from task_logs l join task_instances t on t.id = l.ti_id
    where t.run_id = ${runId} and l.stream <> 'system' order by l.try_number, l.seq`;
  return rows.map((r) => `${r.try_number} ${r.stream} ${r.line}`);
}

async function moves(runId: string): Promise<string[]> {
  const rows = await db.sql<{ to: string; try: number }[]>`
    select payload->>'to' as to, (payload->>'try')::int as try from events where run_id = ${runId} and kind = 'ti.state' order by seq`;
  return rows.map((r) => `${r.to}/${r.try}`);
}

describe('an agent SIGKILLed while its task runs, then started again', () => {
  it('re-attaches to the running task: it ends once, as try 1, with its whole log', async () => {
    const c = await setUp('reattach', 1);
    // The line printed before the kill is stored first, so the restart must not send it again.
    await waitFor('first line stored', async () => (await outputOf(c.runId)).length > 0);
    c.first.child.kill('SIGKILL');
    await c.first.exited;
    expect(isAlive(c.pid)).toBe(true);

    await agent(c.name, c.stateDir);
    // Several heartbeats with the agent back: it holds the attempt again.
    await new Promise((r) => setTimeout(r, 1500));
    expect(await ti(c.runId)).toMatchObject({ state: 'running', try_number: 1 });
    await writeFile(c.go, '');

    expect(await runEnds(db.sql, c.runId)).toBe('success');
    expect(await ti(c.runId)).toMatchObject({ state: 'success', try_number: 1, exit_code: 0 });
    expect(await c.lines()).toEqual([`start 1 ${c.pid}`, 'end 1']);
    expect((await outputOf(c.runId)).sort()).toEqual([
      '1 stderr to-stderr',
      '1 stdout line-after',
      '1 stdout line-before',
    ]);
    expect(await moves(c.runId)).toEqual(['scheduled/0', 'queued/1', 'running/1', 'success/1']);
  });

  it('records the real outcome of a task that ended while the agent was down, with no retry left', async () => {
    const c = await setUp('ended', 0);
    c.first.child.kill('SIGKILL');
    await c.first.exited;
    await writeFile(c.go, '');
    await waitFor('try 1 ended on its own', async () => (await c.lines()).includes('end 1'));

    await agent(c.name, c.stateDir);
    expect(await runEnds(db.sql, c.runId)).toBe('success');
    expect(await ti(c.runId)).toMatchObject({ state: 'success', try_number: 1, exit_code: 0 });
    expect((await outputOf(c.runId)).sort()).toEqual([
      '1 stderr to-stderr',
      '1 stdout line-after',
      '1 stdout line-before',
    ]);
    expect(await moves(c.runId)).toEqual(['scheduled/0', 'queued/1', 'running/1', 'success/1']);
  });

  it('records a task that ended during an 8 s outage of the agent as ending when it exited', async () => {
    const c = await setUp('outage', 0);
    c.first.child.kill('SIGKILL');
    await c.first.exited;
    await writeFile(c.go, '');
    await waitFor('try 1 ended on its own', async () => (await c.lines()).includes('end 1'));
    await waitFor('its process gone', async () => !isAlive(c.pid));
    const exitedAt = Number(await readFile(`${c.ledger}.end`, 'utf8'));
    await new Promise((r) => setTimeout(r, 8000));

    await agent(c.name, c.stateDir);
    expect(await runEnds(db.sql, c.runId)).toBe('success');
    const [row] = await db.sql<{ started_ms: number; ended_ms: number }[]>`
      select (extract(epoch from started_at) * 1000)::float8 as started_ms, (extract(epoch from ended_at) * 1000)::float8 as ended_ms
      from task_instances where run_id = ${c.runId}`;
    // The database and the task read the same clock (one machine).
    expect(Math.abs(row!.ended_ms - exitedAt)).toBeLessThan(100);
    expect(row!.ended_ms).toBeGreaterThan(row!.started_ms);
  });
});
