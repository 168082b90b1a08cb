import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
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
 * An agent SIGKILLed while its task runs, then started again with the same --id and an emptied
 * (or another) --state-dir, as a re-imaged node or a container without a volume would be. It
 * cannot re-attach to the task, so it must kill it before it says Hello: that Hello ends the old
 * attempt and the next try may start at once, here. The effect ledger is the task's own: every
 * execution appends "start", then a "tick" every 100 ms while it lives, then "end", each with its
 * time; two executions of the task are live at once if one ticks after the other started.
 */

let db: TestDatabase;
let server: ServerProcess;
let api: Clients;
let tmp: string;
let agents: AgentProcess[] = [];
const taskPids = new Set<number>();

beforeAll(async () => {
  db = await createTestDatabase();
  tmp = await mkdtemp(path.join(os.tmpdir(), 'leoflow-agent-wiped-'));
  server = await startServer({
    env: { DATABASE_URL: db.url },
    args: ['--heartbeat-interval', '300ms', '--tick-interval', '200ms'],
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

interface Entry {
  what: 'start' | 'tick' | 'end';
  tryNumber: number;
  at: number;
}

/** Each try's first and last sign of life in the ledger: the tries that overlap, said in words. */
function overlaps(entries: Entry[]): string[] {
  const span = new Map<number, { from: number; to: number }>();
  for (const e of entries) {
    const s = span.get(e.tryNumber);
    if (!s) span.set(e.tryNumber, { from: e.at, to: e.at });
    else s.to = Math.max(s.to, e.at);
  }
  const found: string[] = [];
  const tries = [...span.entries()].sort((a, b) => a[1].from - b[1].from);
  for (let i = 1; i < tries.length; i++) {
    const [prevTry, prev] = tries[i - 1]!;
    const [thisTry, cur] = tries[i]!;
    if (prev.to >= cur.from)
      found.push(
        `try ${prevTry} was live until ${prev.to}, after try ${thisTry} started at ${cur.from} (${prev.to - cur.from} ms)`,
      );
  }
  return found;
}

async function wipedRestart(name: string, nextStateDir: (old: string) => Promise<string>) {
  const ledger = path.join(tmp, `${name}.ledger`);
  const stateDir = path.join(tmp, `${name}.state`);
  const script = [
    `echo "start $LEOFLOW_TRY_NUMBER $$ $(date +%s%3N)" >> ${ledger}`,
    // Try 1 lives long enough to outlast the agent's restart; a later try is short.
    'i=0; n=10; [ "$LEOFLOW_TRY_NUMBER" = 1 ] && n=150',
    `while [ $i -lt $n ]; do echo "tick $LEOFLOW_TRY_NUMBER $$ $(date +%s%3N)" >> ${ledger}; sleep 0.1; i=$((i+1)); done`,
    `echo "end $LEOFLOW_TRY_NUMBER $$ $(date +%s%3N)" >> ${ledger}`,
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
      '    retries: 2',
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

  first.child.kill('SIGKILL');
  await first.exited;
  expect(isAlive(pid)).toBe(true);
  const second = await agent(name, await nextStateDir(stateDir));
  const aliveAfterHello = isAlive(pid);
  expect(await runEnds(db.sql, runId, { timeoutMs: 60_000 })).toBe('success');
  const entries = (await lines()).map((l) => {
    const [what, t, , at] = l.split(' ');
    return { what: what as Entry['what'], tryNumber: Number(t), at: Number(at) };
  });
  expect(overlaps(entries)).toEqual([]);
  // The task was gone before the agent said Hello, so before anything could start try 2.
  expect(aliveAfterHello).toBe(false);
  expect(entries.filter((e) => e.what === 'end').map((e) => e.tryNumber)).toEqual([2]);
  expect(second.output()).toContain('killed the tasks an earlier process of this agent left');
}

describe('an agent restarted without its state directory while its task runs', () => {
  it('with the state directory emptied: kills the old task before Hello; no two tries live at once', async () => {
    await wipedRestart('wiped', async (dir) => {
      await rm(dir, { recursive: true, force: true });
      await mkdir(dir, { recursive: true });
      return dir;
    });
  });

  it('with another state directory: the same', async () => {
    await wipedRestart('moved', async (dir) => `${dir}.elsewhere`);
  });
});
