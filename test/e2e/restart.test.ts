import { readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { cli, waitFor } from '../helpers/leoflow-process.js';
import { replicasForFile } from '../helpers/server-fixture.js';

/**
 * Stop the control plane mid-run and start it again: the run finishes, nothing is lost and no
 * task runs twice. The tasks themselves append to a file, so "ran once" is checked from the
 * task's side as well as from the database.
 */

const f = replicasForFile({ tmpPrefix: 'leoflow-restart-' });
const start = f.launcher(['--heartbeat-interval', '200ms', '--heartbeat-threshold', '5s']);

describe('restart mid-run', () => {
  it('finishes the run after a graceful stop and a new start, running each task exactly once', async () => {
    const ran = path.join(f.tmp, 'ran.log');
    const file = path.join(f.tmp, 'chain.yaml');
    const record = `echo $LEOFLOW_TASK_ID $LEOFLOW_TRY_NUMBER >> ${ran}`;
    await writeFile(
      file,
      [
        'dag_id: chain',
        'tasks:',
        `  - id: a`,
        `    command: ["sh", "-c", "${record}; echo a-start; sleep 2; echo a-done"]`,
        `  - id: b`,
        `    command: ["sh", "-c", "${record}; echo b"]`,
        `    depends_on: [a]`,
        `  - id: c`,
        `    command: ["sh", "-c", "${record}; echo c"]`,
        `    depends_on: [b]`,
        '',
      ].join('\n'),
    );

    const first = await start();
    expect((await cli(first.url, ['dag', 'apply', file])).code).toBe(0);
    const t = await cli(first.url, ['run', 'trigger', 'chain', '-o', 'json']);
    const runId = JSON.parse(t.stdout).run_id as string;
    await waitFor('a running', async () => {
      const [row] = await f.db.sql<
        { state: string }[]
      >`select state from task_instances where run_id = ${runId} and task_id = 'a'`;
      return row?.state === 'running';
    });

    // Graceful stop while `a` runs: the replica stops stepping, lets `a` finish and records it.
    const exit = await first.stop();
    expect(exit.code).toBe(0);
    const mid = await f.db.sql<{ task_id: string; state: string; try_number: number }[]>`
      select task_id, state, try_number from task_instances where run_id = ${runId} order by task_id`;
    expect(mid[0]).toMatchObject({ task_id: 'a', state: 'success', try_number: 1 });
    expect(mid.slice(1).map((r) => r.state)).toEqual(['none', 'none']);
    const [midRun] = await f.db.sql<{ state: string }[]>`select state from dag_runs where id = ${runId}`;
    expect(midRun!.state).toBe('running');

    const second = await start();
    await waitFor('run success', async () => {
      const [row] = await f.db.sql<{ state: string }[]>`select state from dag_runs where id = ${runId}`;
      return row?.state === 'success';
    });
    const tis = await f.db.sql<{ task_id: string; state: string; try_number: number; exit_code: number }[]>`
      select task_id, state, try_number, exit_code from task_instances where run_id = ${runId} order by task_id`;
    expect(tis).toEqual([
      { task_id: 'a', state: 'success', try_number: 1, exit_code: 0 },
      { task_id: 'b', state: 'success', try_number: 1, exit_code: 0 },
      { task_id: 'c', state: 'success', try_number: 1, exit_code: 0 },
    ]);
    // From the tasks' side: each ran once, first try.
    expect((await readFile(ran, 'utf8')).trim().split('\n').sort()).toEqual(['a 1', 'b 1', 'c 1']);
    // From the audit log: one start per task.
    const starts = await f.db.sql<{ task_id: string; n: number }[]>`
      select payload->>'task_id' as task_id, count(*)::int as n from events
      where run_id = ${runId} and kind = 'ti.state' and payload->>'to' = 'running' group by 1 order by 1`;
    expect(starts).toEqual([
      { task_id: 'a', n: 1 },
      { task_id: 'b', n: 1 },
      { task_id: 'c', n: 1 },
    ]);
    // Logs written before the restart are still there.
    const logs = await cli(second.url, ['logs', runId, '--task', 'a']);
    expect(logs.stdout).toMatch(/^\[a #1\] a-start$/m);
    expect(logs.stdout).toMatch(/^\[a #1\] a-done$/m);
    expect((await second.stop()).code).toBe(0);
  });
});
