import { describe, expect, it } from 'vitest';
import { applyDagFile, triggerByCli } from '../helpers/dag-file.js';
import { cli, waitFor } from '../helpers/leoflow-process.js';
import { metricSeries } from '../helpers/scrape-metrics.js';
import { serverForFile } from '../helpers/server-fixture.js';

/**
 * Fault: a poison run — one whose spec snapshot is corrupt, so advancing it throws on every step.
 * The real server runs several runs; one run's snapshot is corrupted while its first task runs.
 * The planner marks that run poisoned (once) and skips it; the other runs are unaffected and the
 * server stays up. What the design implies for the poisoned run itself: nothing new is started
 * for it, the attempt already running finishes and is recorded, and once every TI has settled
 * (the running one ended, the unstarted one never will start) the run reaper finalizes it.
 */

const RUNS = 4;
const f = serverForFile({
  args: [
    ...['--run-orphan-threshold', '1s', '--tick-interval', '200ms'],
    ...['--heartbeat-interval', '200ms', '--heartbeat-threshold', '5s'],
  ],
  tmpPrefix: 'leoflow-poison-',
});

async function tiStates(runId: string) {
  return f.db.sql<{ task_id: string; state: string; try_number: number }[]>`
    select task_id, state, try_number from task_instances where run_id = ${runId} order by task_id`;
}

describe('poison run', () => {
  it('a run that throws when advanced is poisoned and reaped; the other runs and the server are unaffected', async () => {
    const { db, server } = f;
    const pid = server.child.pid;
    await applyDagFile(server.url, f.tmp, {
      dagId: 'slowpair',
      top: ['max_active_runs: 8'],
      tasks: [
        '  - id: a',
        '    command: ["sleep", "1"]',
        '  - id: b',
        '    command: ["sleep", "1"]',
        '    depends_on: [a]',
      ],
    });
    const runIds: string[] = [];
    const trigger = async () => {
      runIds.push(await triggerByCli(server.url, 'slowpair'));
      return runIds.at(-1)!;
    };
    await trigger();
    const victim = await trigger();

    // While its first task runs, corrupt the victim's spec: it is moved to a version of its own
    // in which `a` depends on a task that does not exist, so topologicalOrder never reaches it and
    // advanceRun throws.
    await waitFor(
      'victim a running',
      async () => (await tiStates(victim)).find((t) => t.task_id === 'a')?.state === 'running',
      10_000,
      20,
    );
    const corrupted = await db.sql`
      with bad as (
        insert into dag_versions (dag_id, version, spec, max_active_runs)
        select v.dag_id, 1000, jsonb_set(v.spec, '{tasks,0,dependsOn}', '["ghost"]'), v.max_active_runs
        from dag_runs r join dag_versions v on v.dag_id = r.dag_id and v.version = r.dag_version
        where r.id = ${victim} and v.spec->'tasks'->0->>'id' = 'a'
        returning dag_id, version)
      update dag_runs r set dag_version = bad.version from bad where r.id = ${victim}`;
    expect(corrupted.count).toBe(1);
    // More runs arrive while the victim is being poisoned.
    while (runIds.length < RUNS) await trigger();
    const others = runIds.filter((id) => id !== victim);

    const poison = await waitFor(
      'victim poisoned',
      async () => {
        const [row] = await db.sql<
          { poison_error: string | null }[]
        >`select poison_error from dag_runs where id = ${victim}`;
        return row?.poison_error ?? null;
      },
      5000,
    );
    expect(poison).toBe(`task "a" depends on unknown task "ghost"`);

    // Every other run ends success, each task once.
    await waitFor(
      'other runs success',
      async () => {
        const rows = await db.sql<{ state: string }[]>`select state from dag_runs where id = any(${others}::bigint[])`;
        return rows.every((r) => r.state === 'success');
      },
      20_000,
    );
    for (const id of others) {
      expect(await tiStates(id)).toEqual([
        { task_id: 'a', state: 'success', try_number: 1 },
        { task_id: 'b', state: 'success', try_number: 1 },
      ]);
    }

    // The victim: its running attempt ended and was recorded; nothing was started after the
    // poisoning; with nothing left in flight the run reaper finalized it (failed: b never ran).
    await waitFor(
      'victim finalized',
      async () => {
        const [row] = await db.sql<{ state: string }[]>`select state from dag_runs where id = ${victim}`;
        return row?.state !== 'running';
      },
      10_000,
    );
    expect(await tiStates(victim)).toEqual([
      { task_id: 'a', state: 'success', try_number: 1 },
      { task_id: 'b', state: 'none', try_number: 0 },
    ]);
    const events = await db.sql<{ kind: string; payload: Record<string, unknown> }[]>`
      select kind, payload from events where run_id = ${victim} and kind in ('run.state', 'run.poisoned') order by seq`;
    expect(events.filter((e) => e.kind === 'run.poisoned')).toEqual([
      { kind: 'run.poisoned', payload: { error: poison } },
    ]);
    expect(events.filter((e) => e.kind === 'run.state').map((e) => e.payload.to)).toEqual([
      'queued',
      'running',
      'failed',
    ]);
    expect(events.at(-1)!.payload).toEqual({ to: 'failed', reason: 'orphan_reaped' });

    // The server stayed up: same process, API answering, the panic counted, one run reaped.
    expect(server.child.pid).toBe(pid);
    expect(server.child.exitCode).toBeNull();
    const list = await cli(server.url, ['run', 'list', '--dag', 'slowpair', '-o', 'json']);
    expect(list.code, list.stderr).toBe(0);
    expect(
      JSON.parse(list.stdout)
        .map((r: { run_id: string; state: string }) => [r.run_id, r.state])
        .sort(),
    ).toEqual(runIds.map((id) => [id, id === victim ? 'failed' : 'success']).sort());
    expect(
      await metricSeries(server.metricsUrl, 'leoflow_scheduler_panics_total{phase="plan.advance"}'),
    ).toBeGreaterThanOrEqual(1);
    await waitFor(
      'leoflow_orphan_reaped_total{kind="run"}',
      async () => (await metricSeries(server.metricsUrl, 'leoflow_orphan_reaped_total{kind="run"}')) === 1,
      5000,
    );

    // Skipped from now on, not re-poisoned every tick.
    await new Promise((r) => setTimeout(r, 600));
    const [again] = await db.sql<
      { n: number }[]
    >`select count(*)::int as n from events where run_id = ${victim} and kind = 'run.poisoned'`;
    expect(again!.n).toBe(1);

    expect((await server.stop()).code).toBe(0);
  });
});
