import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cli, startServer, waitFor, type ServerProcess } from '../helpers/leoflow-process.js';
import { bulkPastRuns } from '../helpers/history-fixtures.js';
import { createTestDatabase, type TestDatabase } from '../helpers/test-database.js';
import { processEnds } from '../helpers/process-gone.js';

/**
 * `leoflow db clean`, `leoflow dag delete` and the retention setting, end to end: the real server
 * (subprocess executor) driven by the real CLI, the history checked in Postgres.
 */

let db: TestDatabase;
let server: ServerProcess;
let tmp: string;
let dagsDir: string;

async function applyDag(name: string, yaml: string, dir = tmp): Promise<string> {
  const file = path.join(dir, `${name}.yaml`);
  await writeFile(file, yaml);
  const r = await cli(server.url, ['dag', 'apply', file]);
  expect(r.code, r.stderr).toBe(0);
  return file;
}

/** Triggers a run of `dagId` and waits for it to end; resolves its id. */
async function runToEnd(dagId: string): Promise<string> {
  const r = await cli(server.url, ['run', 'trigger', dagId, '--wait']);
  expect(r.code, r.stdout + r.stderr).toBe(0);
  return /^run (\d+) of /m.exec(r.stdout)![1]!;
}

const twoTasks = (dagId: string) =>
  `dag_id: ${dagId}\ntasks:\n  - id: a\n    command: "echo one; echo two"\n  - id: b\n    depends_on: [a]\n    command: "echo three >&2"\n`;

/** Every row of the history tables, as text: equal before and after means nothing was written. */
async function everything(): Promise<Record<string, string>> {
  const [row] = await db.sql<Record<string, string>[]>`
    select (select coalesce(string_agg(x::text, ',' order by x::text), '') from dags x) as dags,
      (select coalesce(string_agg(x::text, ',' order by x.id), '') from dag_runs x) as runs,
      -- A running task's heartbeat is the holder's, not history: it moves while the test looks.
      (select coalesce(string_agg((to_jsonb(x) - 'heartbeat_at')::text, ',' order by x.id), '') from task_instances x) as tis,
      (select coalesce(string_agg(x::text, ',' order by x.seq), '') from events x) as events,
      (select coalesce(string_agg(x::text, ',' order by x.ti_id, x.try_number, x.seq), '') from task_logs x) as logs`;
  return row!;
}

/** What is stored of one DAG's history, by table. */
async function historyOf(
  dagId: string,
): Promise<{ runs: number; tis: number; events: number; logs: number; dagEvents: number }> {
  const [row] = await db.sql<{ runs: number; tis: number; events: number; logs: number; dagEvents: number }[]>`
    with r as (select id from dag_runs where dag_id = ${dagId}), t as (select id from task_instances where run_id in (select id from r))
    select (select count(*) from r)::int as runs, (select count(*) from t)::int as tis,
      (select count(*) from events where run_id in (select id from r))::int as events,
      (select count(*) from task_logs where ti_id in (select id from t))::int as logs,
      (select count(*) from events where run_id is null and payload->>'dag_id' = ${dagId})::int as "dagEvents"`;
  return row!;
}

/** Rows of these runs (by id) left anywhere: their events and lines are looked up by the ids, not through the runs. */
async function leftOf(runIds: string[], tiIds: string[]): Promise<number> {
  const [row] = await db.sql<{ n: number }[]>`
    select ((select count(*) from dag_runs where id = any(${runIds}::bigint[])) + (select count(*) from task_instances where id = any(${tiIds}::bigint[]))
      + (select count(*) from events where run_id = any(${runIds}::bigint[])) + (select count(*) from task_logs where ti_id = any(${tiIds}::bigint[])))::int as n`;
  return row!.n;
}

beforeAll(async () => {
  db = await createTestDatabase();
  tmp = await mkdtemp(path.join(os.tmpdir(), 'leoflow-e2e-history-'));
  dagsDir = path.join(tmp, 'dags');
  await import('node:fs/promises').then((fs) => fs.mkdir(dagsDir));
  await writeFile(path.join(dagsDir, 'from_folder.yaml'), twoTasks('from_folder'));
  server = await startServer({
    env: { DATABASE_URL: db.url },
    args: ['--kill-grace', '300ms', '--dags', dagsDir, '--retention', 'off'],
  });
});

afterAll(async () => {
  await server?.stop();
  await db?.drop();
  await rm(tmp, { recursive: true, force: true });
});

describe('leoflow db clean', () => {
  it('names what is wrong with bad input, and removes nothing', async () => {
    await applyDag('alpha', twoTasks('alpha'));
    await runToEnd('alpha');
    const before = await everything();
    const cases: [string[], number, string][] = [
      [
        ['db', 'clean', '--before', 'yesterday', '--yes'],
        1,
        'leoflow: --before: "yesterday" is not a date or a time with its zone; give a date, YYYY-MM-DD (midnight UTC), or a time with its zone, such as 2026-01-31T18:00:00Z\n',
      ],
      [
        ['db', 'clean', '--before', '2026-02-30', '--yes'],
        1,
        'leoflow: --before: "2026-02-30" is not a day of the calendar; give a date, YYYY-MM-DD (midnight UTC), or a time with its zone, such as 2026-01-31T18:00:00Z\n',
      ],
      [
        ['db', 'clean', '--before', '2026-01-31T18:00', '--yes'],
        1,
        'leoflow: --before: "2026-01-31T18:00" is not a date or a time with its zone; give a date, YYYY-MM-DD (midnight UTC), or a time with its zone, such as 2026-01-31T18:00:00Z\n',
      ],
      [
        ['db', 'clean', '--before', '2999-01-01', '--yes'],
        1,
        'leoflow: [invalid_argument] before: 2999-01-01T00:00:00.000Z is in the future: only runs that have ended can be removed, so give a time that has passed\n',
      ],
      [
        ['db', 'clean', '--before', '2020-01-01', '--dag', 'nope', '--dry-run'],
        1,
        'leoflow: [not_found] DAG "nope" not found\n',
      ],
      [
        ['db', 'clean', '--before', '2020-01-01', '--keep-last', '-1', '--yes'],
        1,
        "leoflow: [invalid_argument] keep_last: must be 0 to 10000 (each DAG's latest finished runs to keep), got -1: to keep more history, give an earlier before\n",
      ],
      [
        ['db', 'clean', '--before', '2020-01-01', '--keep-last', '10001', '--dry-run'],
        1,
        "leoflow: [invalid_argument] keep_last: must be 0 to 10000 (each DAG's latest finished runs to keep), got 10001: to keep more history, give an earlier before\n",
      ],
      [
        ['db', 'clean', '--before', '2020-01-01', '--keep-last', '99999999999', '--yes'],
        1,
        'leoflow: --keep-last: must be a whole number from 0 to 10000, got "99999999999"\n',
      ],
      [
        ['db', 'clean', '--before', '2020-01-01', '--keep-last', '2.5', '--yes'],
        1,
        'leoflow: --keep-last: must be a whole number from 0 to 10000, got "2.5"\n',
      ],
    ];
    for (const [args, code, stderr] of cases) {
      const r = await cli(server.url, args);
      expect({ args, code: r.code, stderr: r.stderr }).toEqual({ args, code, stderr });
    }
    const missing = await cli(server.url, ['db', 'clean', '--dry-run']);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toContain("required option '--before <time>' not specified");
    // Without --yes and with no terminal to ask at, it refuses.
    const unconfirmed = await cli(server.url, [
      'db',
      'clean',
      '--before',
      new Date().toISOString(),
      '--keep-last',
      '0',
    ]);
    expect(unconfirmed.code).toBe(1);
    expect(unconfirmed.stderr).toBe(
      'leoflow: db clean removes history for good: pass --yes to go ahead (or --dry-run to see what it would remove)\n',
    );
    expect(await everything()).toEqual(before);
  });

  it('--dry-run writes nothing and counts, per table, exactly what the clean then removes; runs that have not ended and newer ones stay', async () => {
    await applyDag('beta', twoTasks('beta'));
    await applyDag('slow', `dag_id: slow\ntasks:\n  - id: wait\n    command: "echo waiting; sleep 60"\n`);
    const old = [await runToEnd('alpha'), await runToEnd('beta')];
    const slow = await cli(server.url, ['run', 'trigger', 'slow']);
    const slowRun = /^run (\d+) of /m.exec(slow.stdout)![1]!;
    await waitFor(
      'the slow task to run',
      async () =>
        (await db.sql`select 1 from task_instances where run_id = ${slowRun} and state = 'running'`).length > 0,
    );
    await new Promise((r) => setTimeout(r, 20));
    const cutoff = new Date().toISOString();
    await new Promise((r) => setTimeout(r, 20));
    const newer = await runToEnd('alpha');

    const before = await everything();
    const ended = await db.sql<{ n: number }[]>`
      select count(*)::int as n from dag_runs where state in ('success', 'failed', 'cancelled') and ended_at < ${cutoff}`;
    const [stored] = await db.sql<{ tis: number; events: number; logs: number }[]>`
      with r as (select id from dag_runs where state in ('success', 'failed', 'cancelled') and ended_at < ${cutoff}),
      t as (select id from task_instances where run_id in (select id from r))
      select (select count(*) from t)::int as tis, (select count(*) from events where run_id in (select id from r))::int as events,
        (select count(*) from task_logs where ti_id in (select id from t))::int as logs`;
    const dry = await cli(server.url, [
      'db',
      'clean',
      '--before',
      cutoff,
      '--keep-last',
      '0',
      '--dry-run',
      '-o',
      'json',
    ]);
    expect(dry.code, dry.stderr).toBe(0);
    const counted = JSON.parse(dry.stdout) as { dry_run: boolean; counts: Record<string, number> };
    expect(counted.dry_run).toBe(true);
    expect(counted.counts).toEqual({
      dag_runs: ended[0]!.n,
      task_instances: stored!.tis,
      events: stored!.events,
      task_logs: stored!.logs,
    });
    expect(ended[0]!.n).toBeGreaterThanOrEqual(3);
    expect(stored!.tis).toBe(2 * ended[0]!.n);
    expect(stored!.logs).toBeGreaterThanOrEqual(3 * ended[0]!.n);
    expect(await everything()).toEqual(before);
    const text = await cli(server.url, ['db', 'clean', '--before', cutoff, '--keep-last', '0', '--dry-run']);
    expect(text.stdout).toBe(
      `finished runs of every DAG that ended before ${cutoff}:\nTABLE           ROWS\n` +
        `dag_runs        ${counted.counts.dag_runs}\ntask_instances  ${counted.counts.task_instances}\nevents          ${counted.counts.events}\ntask_logs       ${counted.counts.task_logs}\n` +
        'dry run: nothing was removed\n',
    );
    expect(await everything()).toEqual(before);

    const tiIds = (
      await db.sql<{ id: string }[]>`select id from task_instances where run_id = any(${old}::bigint[])`
    ).map((r) => r.id);
    const slowBefore = await historyOf('slow');
    const clean = await cli(server.url, ['db', 'clean', '--before', cutoff, '--keep-last', '0', '--yes', '-o', 'json']);
    expect(clean.code, clean.stderr).toBe(0);
    expect(JSON.parse(clean.stdout)).toEqual({ ...counted, dry_run: false, stopped: false });
    expect(await leftOf(old, tiIds)).toBe(0);
    expect(await historyOf('slow')).toEqual(slowBefore);
    expect((await historyOf('alpha')).runs).toBe(1);
    expect((await db.sql`select 1 from dag_runs where id = ${newer}`).length).toBe(1);
    await cli(server.url, ['run', 'cancel', slowRun]);
  });

  it('--dag cleans one DAG only, and keeps its latest finished run unless told otherwise (--keep-last)', async () => {
    const a = [await runToEnd('alpha'), await runToEnd('alpha'), await runToEnd('alpha')];
    const b = await runToEnd('beta');
    const betaBefore = await historyOf('beta');
    const r = await cli(server.url, ['db', 'clean', '--before', new Date().toISOString(), '--dag', 'alpha', '--yes']);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/^finished runs of DAG alpha that ended before .*, but each DAG's latest finished run:\n/);
    expect(r.stdout).toMatch(/\nremoved\n$/);
    expect((await db.sql<{ id: string }[]>`select id from dag_runs where dag_id = 'alpha'`).map((x) => x.id)).toEqual([
      a[2],
    ]);
    expect(await historyOf('beta')).toEqual(betaBefore);
    expect((await db.sql`select 1 from dag_runs where id = ${b}`).length).toBe(1);
    const all = await cli(server.url, [
      'db',
      'clean',
      '--before',
      new Date().toISOString(),
      '--dag',
      'alpha',
      '--keep-last',
      '0',
      '--yes',
      '-o',
      'json',
    ]);
    expect(all.code, all.stderr).toBe(0);
    expect(JSON.parse(all.stdout)).toMatchObject({ keep_last: 0, counts: { dag_runs: 1, task_instances: 2 } });
    expect((await historyOf('alpha')).runs).toBe(0);
    expect(await historyOf('beta')).toEqual(betaBefore);
  });

  it('Ctrl-C stops a large clean after the batch under way and says exactly what was removed; the same command then goes on', async () => {
    // 10,000 runs of 5 task instances: 10 batches of 5,000 task instances.
    await bulkPastRuns(db.sql, { dagId: 'bulk', runs: 10_000, tisPerRun: 5, daysBack: 30 });
    const bulk = () => historyOf('bulk');
    const full = await bulk();
    expect(full).toMatchObject({ runs: 10_000, tis: 50_000, events: 160_000, logs: 150_000 });
    const args = [
      'db',
      'clean',
      '--before',
      new Date().toISOString(),
      '--dag',
      'bulk',
      '--keep-last',
      '0',
      '--yes',
      '-o',
      'json',
    ];
    const interrupted = await cli(server.url, args, {
      timeoutMs: 120_000,
      onSpawn: (child) => {
        // Interrupt once the first batch is gone (as an operator would, watching it go).
        void waitFor(
          'a first batch removed',
          async () =>
            (await db.sql<{ n: number }[]>`select count(*)::int as n from dag_runs where dag_id = 'bulk'`)[0]!.n <
            10_000,
          60_000,
          20,
        ).then(() => child.kill('SIGINT'));
      },
    });
    expect(interrupted.code, interrupted.stderr).toBe(130);
    expect(interrupted.stderr).toContain('stopping after the batch under way (Ctrl-C again to leave now)\n');
    const out = JSON.parse(interrupted.stdout) as { stopped: boolean; counts: Record<string, number> };
    const left = await bulk();
    expect(out.stopped).toBe(true);
    expect(left.runs).toBeGreaterThan(0);
    // What it says went is exactly what went; what is left is whole.
    expect(out.counts).toEqual({
      dag_runs: full.runs - left.runs,
      task_instances: full.tis - left.tis,
      events: full.events - left.events,
      task_logs: full.logs - left.logs,
    });
    expect(left).toEqual({
      runs: left.runs,
      tis: 5 * left.runs,
      events: 16 * left.runs,
      logs: 15 * left.runs,
      dagEvents: 0,
    });

    const rest = await cli(server.url, args, { timeoutMs: 120_000 });
    expect(rest.code, rest.stderr).toBe(0);
    expect(JSON.parse(rest.stdout)).toMatchObject({
      stopped: false,
      counts: { dag_runs: left.runs, task_instances: left.tis, events: left.events, task_logs: left.logs },
    });
    // No terminal: progress comes as plain lines, on stderr, at most one a second.
    for (const line of rest.stderr.split('\n').filter(Boolean))
      expect(line).toMatch(/^removed \d+ of \d+ runs, \d+ of \d+ task instances$/);
    expect((await bulk()).runs).toBe(0);
  });
});

describe('leoflow dag delete', () => {
  it('refuses a DAG with a run that has not ended; --force stops its task, cancels it and removes everything of that DAG and nothing of another', async () => {
    await applyDag(
      'doomed',
      `dag_id: doomed\ntasks:\n  - id: first\n    command: "echo hi"\n  - id: hang\n    depends_on: [first]\n    command: "echo hanging; sleep 60"\n`,
    );
    await runToEnd('beta');
    const done = await cli(server.url, ['run', 'trigger', 'doomed']);
    const finishedRun = /^run (\d+) of /m.exec(done.stdout)![1]!;
    const hanging = await waitFor('the hanging task to run and say so', async () => {
      const [t] = await db.sql<{ pid: number | null }[]>`
        select pid from task_instances t where run_id = ${finishedRun} and task_id = 'hang' and state = 'running'
          and exists (select 1 from task_logs l where l.ti_id = t.id and l.line = 'hanging')`;
      return t?.pid ?? null;
    });
    const betaBefore = await historyOf('beta');
    const doomedBefore = await historyOf('doomed');
    expect(doomedBefore).toMatchObject({ runs: 1, tis: 2, dagEvents: 1 });

    const refused = await cli(server.url, ['dag', 'delete', 'doomed', '--yes']);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toBe(
      `leoflow: [failed_precondition] DAG "doomed" has 1 run that has not ended (${finishedRun}): cancel it first, or force (--force) to cancel it and delete\n`,
    );
    expect(await historyOf('doomed')).toEqual(doomedBefore);
    const unconfirmed = await cli(server.url, ['dag', 'delete', 'doomed', '--force']);
    expect(unconfirmed.stderr).toBe(
      'leoflow: dag delete removes DAG doomed and all its history for good: pass --yes to go ahead\n',
    );

    const tiIds = (await db.sql<{ id: string }[]>`select id from task_instances where run_id = ${finishedRun}`).map(
      (r) => r.id,
    );
    const forced = await cli(server.url, ['dag', 'delete', 'doomed', '--force', '--yes', '-o', 'json']);
    expect(forced.code, forced.stderr).toBe(0);
    const out = JSON.parse(forced.stdout) as {
      removed: Record<string, number>;
      cancelled_run_ids: string[];
      dag_files: string[];
    };
    expect(out.cancelled_run_ids).toEqual([finishedRun]);
    expect(out.dag_files).toEqual([]);
    expect(out.removed).toMatchObject({ dag_runs: 1, task_instances: 2 });
    expect(out.removed.events).toBeGreaterThanOrEqual(doomedBefore.events + 1);
    expect(out.removed.task_logs).toBeGreaterThanOrEqual(2);
    // The task it was running is stopped, not left behind.
    await processEnds(hanging, 10_000, `pid ${hanging} to be gone`);
    expect(await historyOf('doomed')).toEqual({ runs: 0, tis: 0, events: 0, logs: 0, dagEvents: 0 });
    expect(await leftOf([finishedRun], tiIds)).toBe(0);
    expect((await db.sql`select 1 from dags where dag_id = 'doomed'`).length).toBe(0);
    expect(await historyOf('beta')).toEqual(betaBefore);
    // Its end, reported by the executor after the rows were gone, wrote nothing back.
    await new Promise((r) => setTimeout(r, 500));
    expect(await leftOf([finishedRun], tiIds)).toBe(0);

    const gone = await cli(server.url, ['dag', 'delete', 'doomed', '--yes']);
    expect(gone.code).toBe(1);
    expect(gone.stderr).toBe('leoflow: [not_found] DAG "doomed" not found\n');
  });

  it("says when a DAG file among the server's --dags will bring the DAG back", async () => {
    await runToEnd('from_folder');
    const r = await cli(server.url, ['dag', 'delete', 'from_folder', '--yes']);
    expect(r.code, r.stderr).toBe(0);
    const file = path.join(dagsDir, 'from_folder.yaml');
    expect(r.stdout).toBe(
      'DAG from_folder deleted: 1 run, 2 task instances, ' +
        `${/(\d+) events/.exec(r.stdout)![1]} events and ${/(\d+) log lines/.exec(r.stdout)![1]} log lines removed\n` +
        `note: ${file} defines DAG from_folder and is among the server's --dags: the server applies it again at its next start (with no history); remove the file to keep the DAG deleted\n`,
    );
    expect(await historyOf('from_folder')).toEqual({ runs: 0, tis: 0, events: 0, logs: 0, dagEvents: 0 });
  });
});

describe('retention', () => {
  it('a server started with --retention removes the finished runs that ended before it, and only those', async () => {
    const old = await runToEnd('beta');
    const recent = await runToEnd('beta');
    // A run that has not ended: queued behind its paused DAG.
    await applyDag('held', twoTasks('held'));
    expect((await cli(server.url, ['dag', 'pause', 'held'])).code).toBe(0);
    const held = /^run (\d+) of /m.exec((await cli(server.url, ['run', 'trigger', 'held'])).stdout)![1]!;
    await server.stop();
    // Two days ago, as far as the database knows, and so every run made before it (ids follow
    // creation, which the keeper's reading of runs relies on).
    await db.sql`update dag_runs set created_at = created_at - interval '2 days', ended_at = ended_at - interval '2 days' where id <= ${old}`;
    await db.sql`update dag_runs set created_at = created_at - interval '2 days' where id = ${held}`;
    const tiIds = (await db.sql<{ id: string }[]>`select id from task_instances where run_id = ${old}`).map(
      (r) => r.id,
    );
    server = await startServer({ env: { DATABASE_URL: db.url }, args: ['--kill-grace', '300ms', '--retention', '1d'] });
    await waitFor(
      'the old run to be removed',
      async () => (await db.sql`select 1 from dag_runs where id = ${old}`).length === 0,
      20_000,
      200,
    );
    expect((await db.sql`select 1 from task_instances where id = any(${tiIds}::bigint[])`).length).toBe(0);
    expect((await db.sql`select 1 from dag_runs where id = ${recent}`).length).toBe(1);
    const [h] = await db.sql<{ state: string }[]>`select state from dag_runs where id = ${held}`;
    expect(h?.state).toBe('queued');
  });
});
