import { readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { waitFor } from '../helpers/leoflow-process.js';
import { startLedgerTask } from '../helpers/ledger-task.js';
import { isAlive } from '../helpers/process-group.js';
import { runEnds } from '../helpers/run-ends.js';
import { agentsOfEachTest, serverForFile } from '../helpers/server-fixture.js';

/**
 * An agent SIGKILLed while its task runs, and started again with the same id and state directory:
 * it re-attaches to the task's shim, so the task ends once, as the same try, with its whole log.
 * Each task appends "start TRY PID" and "end TRY" to a ledger and waits for a `go` file. The
 * heartbeat threshold is long: a restarted agent that came back after it would rightly find its
 * attempt retried elsewhere (and stop it), which is not what this test is about.
 */

const f = serverForFile({
  tmpPrefix: 'leoflow-agent-restart-',
  args: ['--heartbeat-interval', '300ms', '--heartbeat-threshold', '30s', '--tick-interval', '200ms'],
});
const agents = agentsOfEachTest(f);

/** An agent of the ledger task's zone on its state directory. */
const agent = (id: string, stateDir: string) => agents.connect(id, ['--labels', `zone=${id}`, '--state-dir', stateDir]);

async function setUp(name: string, retries: number) {
  const go = path.join(f.tmp, `${name}.go`);
  const t = await startLedgerTask(f, agents, {
    name,
    retries,
    script: (ledger) => [
      `echo "start $LEOFLOW_TRY_NUMBER $$" >> ${ledger}`,
      'echo line-before',
      `while [ ! -e ${go} ]; do sleep 0.05; done`,
      'echo line-after',
      'echo to-stderr >&2',
      `echo "end $LEOFLOW_TRY_NUMBER" >> ${ledger}`,
      // The task's last act: when it ends, in ms, by this machine's clock.
      `date +%s%3N > ${ledger}.end`,
    ],
  });
  await waitFor('try 1 running in the database', async () => (await ti(t.runId))?.state === 'running');
  return { ...t, name, go };
}

async function ti(runId: string) {
  const [row] = await f.db.sql<{ state: string; try_number: number; exit_code: number | null }[]>`
    select state, try_number, exit_code from task_instances where run_id = ${runId}`;
  return row;
}

async function outputOf(runId: string): Promise<string[]> {
  const rows = await f.db.sql<{ try_number: number; stream: string; line: string }[]>`
    select l.try_number, l.stream, l.line from task_logs l join task_instances t on t.id = l.ti_id
    where t.run_id = ${runId} and l.stream <> 'system' order by l.try_number, l.seq`;
  return rows.map((r) => `${r.try_number} ${r.stream} ${r.line}`);
}

async function moves(runId: string): Promise<string[]> {
  const rows = await f.db.sql<{ to: string; try: number }[]>`
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

    expect(await runEnds(f.db.sql, c.runId)).toBe('success');
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
    expect(await runEnds(f.db.sql, c.runId)).toBe('success');
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
    expect(await runEnds(f.db.sql, c.runId)).toBe('success');
    const [row] = await f.db.sql<{ started_ms: number; ended_ms: number }[]>`
      select (extract(epoch from started_at) * 1000)::float8 as started_ms, (extract(epoch from ended_at) * 1000)::float8 as ended_ms
      from task_instances where run_id = ${c.runId}`;
    // The database and the task read the same clock (one machine).
    expect(Math.abs(row!.ended_ms - exitedAt)).toBeLessThan(100);
    expect(row!.ended_ms).toBeGreaterThan(row!.started_ms);
  });
});
