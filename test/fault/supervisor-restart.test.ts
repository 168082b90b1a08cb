import { existsSync } from 'node:fs';
import { readFile, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { applyDagFile, triggerByCli } from '../helpers/dag-file.js';
import { waitFor, type ServerProcess } from '../helpers/leoflow-process.js';
import { isAlive as alive } from '../helpers/process-group.js';
import { runEnds } from '../helpers/run-ends.js';
import { FAST_FAULT_FLAGS } from '../helpers/fault-flags.js';
import { replicasForFile } from '../helpers/server-fixture.js';

/**
 * The control plane SIGKILLed while a task runs (Lite, subprocess executor). The task runs under
 * its shim, which outlives the server: a server restarted on the same state directory re-attaches
 * to it and records its real end, once, as the same try, with its whole log. Where the state
 * directory is gone, the restart kills the orphaned task before another try can start.
 *
 * Each task appends to a ledger ("start TRY PID", "end TRY") and waits for a `go` file, so the
 * test decides whether it ends before or after the restart. A short heartbeat threshold makes a
 * lost attempt visible fast: without adoption the reaper would retry it while it still runs.
 */

const f = replicasForFile({ tmpPrefix: 'leoflow-fault-shim-', eachTest: true });
/** Task processes that may outlive their control plane (detached process groups). */
const { taskPids } = f;
const launch = f.launcher(FAST_FAULT_FLAGS);

interface Case {
  dagId: string;
  ledger: string;
  go: string;
  stateDir: string;
}

async function setUp(
  dagId: string,
  retries: number,
): Promise<Case & { server: ServerProcess; runId: string; pid: number }> {
  const c: Case = {
    dagId,
    ledger: path.join(f.tmp, `${dagId}.ledger`),
    go: path.join(f.tmp, `${dagId}.go`),
    stateDir: path.join(f.tmp, `${dagId}.state`),
  };
  const script = [
    `echo "start $LEOFLOW_TRY_NUMBER $$" >> ${c.ledger}`,
    'echo line-before',
    `while [ ! -e ${c.go} ]; do sleep 0.05; done`,
    'echo line-after',
    'echo to-stderr >&2',
    `echo "end $LEOFLOW_TRY_NUMBER" >> ${c.ledger}`,
    // The task's last act: when it ends, in ms, by this machine's clock.
    `date +%s%3N > ${c.ledger}.end`,
  ].join('; ');
  const server = await launch(['--state-dir', c.stateDir]);
  await applyDagFile(server.url, f.tmp, {
    dagId,
    tasks: [
      '  - id: work',
      `    command: ["sh", "-c", ${JSON.stringify(script)}]`,
      `    retries: ${retries}`,
      '    retry_delay: 100ms',
    ],
  });
  const runId = await triggerByCli(server.url, dagId);
  const started = await waitFor(
    'try 1 started',
    async () => (await ledger(c)).find((l) => l.startsWith('start 1 ')) ?? null,
  );
  const pid = Number(started.split(' ')[2]);
  taskPids.add(pid);
  await waitFor('try 1 running in the database', async () => (await attempt(runId))?.state === 'running');
  return { ...c, server, runId, pid };
}

/** A task (no retry left) whose server is SIGKILLed while it runs, and which then ends on its own, its process gone. */
async function endedWhileDown(dagId: string) {
  const c = await setUp(dagId, 0);
  await c.server.kill();
  await writeFile(c.go, '');
  await waitFor('try 1 ended on its own', async () => (await ledger(c)).includes('end 1'));
  await waitFor('its process gone', async () => !alive(c.pid));
  return c;
}

async function ledger(c: Case): Promise<string[]> {
  return (await readFile(c.ledger, 'utf8').catch(() => '')).split('\n').filter((l) => l !== '');
}

async function attempt(runId: string) {
  const [row] = await f.db.sql<
    { id: string; state: string; try_number: number; exit_code: number | null; error: string | null }[]
  >`
    select id, state, try_number, exit_code, error from task_instances where run_id = ${runId} and task_id = 'work'`;
  return row;
}

async function logOf(runId: string): Promise<string[]> {
  const rows = await f.db.sql<{ try_number: number; stream: string; line: string }[]>`
    select l.try_number, l.stream, l.line from task_logs l join task_instances t on t.id = l.ti_id
    where t.run_id = ${runId} order by l.try_number, l.seq`;
  return rows.filter((r) => r.stream !== 'system').map((r) => `${r.try_number} ${r.stream} ${r.line}`);
}

async function tries(runId: string): Promise<string[]> {
  const rows = await f.db.sql<{ to: string; try: number; reason: string | null }[]>`
    select payload->>'to' as to, (payload->>'try')::int as try, payload->>'reason' as reason
    from events where run_id = ${runId} and kind = 'ti.state' order by seq`;
  return rows.map((r) => `${r.to}/${r.try}${r.reason ? `:${r.reason}` : ''}`);
}

describe('the control plane SIGKILLed while a task runs', () => {
  it('a restart re-attaches to the running task: it ends once, as try 1, with its whole log', async () => {
    const c = await setUp('shim_reattach', 1);
    await c.server.kill();
    // The shim keeps the task running with no server at all, past the heartbeat threshold.
    await new Promise((r) => setTimeout(r, 1500));
    expect(alive(c.pid)).toBe(true);

    const second = await launch(['--state-dir', c.stateDir]);
    // Past the threshold again, now with a server that could reap it: it must not.
    await new Promise((r) => setTimeout(r, 2000));
    expect(await attempt(c.runId)).toMatchObject({ state: 'running', try_number: 1 });
    await writeFile(c.go, '');

    expect(await runEnds(f.db.sql, c.runId)).toBe('success');
    expect(await attempt(c.runId)).toMatchObject({ state: 'success', try_number: 1, exit_code: 0 });
    expect(await ledger(c)).toEqual([`start 1 ${c.pid}`, 'end 1']);
    expect((await logOf(c.runId)).sort()).toEqual([
      '1 stderr to-stderr',
      '1 stdout line-after',
      '1 stdout line-before',
    ]);
    expect(await tries(c.runId)).toEqual(['scheduled/0', 'queued/1', 'running/1', 'success/1']);
    expect(
      second.logs.some((l) => l.msg === 'adopted the attempts an earlier process left' && l.reattached === 1),
    ).toBe(true);
    expect((await second.stop()).code).toBe(0);
  });

  it('a task that ended while no server ran is recorded with its real outcome, even with no retry left', async () => {
    const c = await endedWhileDown('shim_ended');

    const second = await launch(['--state-dir', c.stateDir]);
    expect(await runEnds(f.db.sql, c.runId)).toBe('success');
    expect(await attempt(c.runId)).toMatchObject({ state: 'success', try_number: 1, exit_code: 0 });
    expect((await logOf(c.runId)).sort()).toEqual([
      '1 stderr to-stderr',
      '1 stdout line-after',
      '1 stdout line-before',
    ]);
    expect(await tries(c.runId)).toEqual(['scheduled/0', 'queued/1', 'running/1', 'success/1']);
    // Its folder is gone once its end is recorded.
    await waitFor(
      'attempt folder removed',
      async () =>
        !existsSync(path.join(c.stateDir, 'attempts')) ||
        (await readdirNames(path.join(c.stateDir, 'attempts'))).every((n) => n === 'owner.json'),
    );
    expect((await second.stop()).code).toBe(0);
  });

  it('a task that ended during an 8 s outage is recorded as ending when it exited, not when the restart found it', async () => {
    const c = await endedWhileDown('shim_outage');
    const exitedAt = Number(await readFile(`${c.ledger}.end`, 'utf8'));
    await new Promise((r) => setTimeout(r, 8000));

    const second = await launch(['--state-dir', c.stateDir]);
    expect(await runEnds(f.db.sql, c.runId)).toBe('success');
    const [row] = await f.db.sql<{ started_ms: number; ended_ms: number }[]>`
      select (extract(epoch from started_at) * 1000)::float8 as started_ms, (extract(epoch from ended_at) * 1000)::float8 as ended_ms
      from task_instances where run_id = ${c.runId}`;
    // The database and the task read the same clock (one machine).
    expect(Math.abs(row!.ended_ms - exitedAt)).toBeLessThan(100);
    expect(row!.ended_ms).toBeGreaterThan(row!.started_ms);
    expect((await second.stop()).code).toBe(0);
  });

  it('with the state directory gone, the restart kills the orphaned task before try 2 starts', async () => {
    const c = await setUp('shim_gone', 1);
    await c.server.kill();
    expect(alive(c.pid)).toBe(true);
    await rm(c.stateDir, { recursive: true, force: true });

    const second = await launch(['--state-dir', c.stateDir]);
    // Killed at start, before the scheduler could retry it.
    expect(alive(c.pid)).toBe(false);
    await writeFile(c.go, '');
    expect(await runEnds(f.db.sql, c.runId)).toBe('success');
    const lines = await ledger(c);
    expect(lines[0]).toBe(`start 1 ${c.pid}`);
    expect(lines.slice(1).map((l) => l.split(' ').slice(0, 2).join(' '))).toEqual(['start 2', 'end 2']);
    expect(await attempt(c.runId)).toMatchObject({ state: 'success', try_number: 2 });
    expect(second.logs.some((l) => l.msg === 'adopted the attempts an earlier process left' && l.killed === 1)).toBe(
      true,
    );
    expect((await second.stop()).code).toBe(0);
  });
});

async function readdirNames(dir: string): Promise<string[]> {
  const { readdir } = await import('node:fs/promises');
  return readdir(dir).catch(() => []);
}
