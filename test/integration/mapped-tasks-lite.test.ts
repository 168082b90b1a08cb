import { readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { cli, waitFor } from '../helpers/leoflow-process.js';
import { runEnds } from '../helpers/run-ends.js';
import { replicasForFile } from '../helpers/server-fixture.js';

/**
 * Mapped tasks on a Lite server (subprocess executor, shipped defaults but for an output size that
 * holds a 100,000-item list): `map: { over: gen.items }` runs the task once per item, each with its
 * item, and its downstream gets their outputs in item order.
 */
const f = replicasForFile({ tmpPrefix: 'leoflow-map-' });
const start = f.launcher(['--max-output-size', '1MiB']);

/** A DAG whose `gen` writes {"items": [0, 1, … n−1]} and whose `each` echoes its item back. */
async function mapDag(dagId: string, n: number, extra: { maxParallel?: number; each?: string } = {}): Promise<string> {
  const file = path.join(f.tmp, `${dagId}.yaml`);
  const gen = `seq 0 $((${n} - 1)) | paste -sd, - | sed 's/^/{"items":[/; s/$/]}/' > "$LEOFLOW_OUTPUT"`;
  const each = extra.each ?? `printf '%s' "$LEOFLOW_MAP_ITEM" > "$LEOFLOW_OUTPUT"`;
  await writeFile(
    file,
    [
      `dag_id: ${dagId}`,
      'tasks:',
      '  - id: gen',
      `    command: ${JSON.stringify(gen)}`,
      '  - id: each',
      `    command: ${JSON.stringify(each)}`,
      '    depends_on: [gen]',
      `    map: { over: gen.items${extra.maxParallel ? `, max_parallel: ${extra.maxParallel}` : ''} }`,
      '  - id: collect',
      `    command: ${JSON.stringify(`cp "$LEOFLOW_INPUTS" "${path.join(f.tmp, `${dagId}-inputs.json`)}"`)}`,
      '    depends_on: [each]',
      '',
    ].join('\n'),
  );
  return file;
}

async function trigger(url: string, file: string, dagId: string): Promise<string> {
  expect((await cli(url, ['dag', 'apply', file])).code).toBe(0);
  const t = await cli(url, ['run', 'trigger', dagId, '-o', 'json']);
  expect(t.code, t.stderr).toBe(0);
  return JSON.parse(t.stdout).run_id as string;
}

async function states(runId: string): Promise<Record<string, { state: string; error: string | null }>> {
  const rows = await f.db.sql<{ task_id: string; state: string; error: string | null }[]>`
    select task_id, state, error from task_instances where run_id = ${runId} and map_parent is null`;
  return Object.fromEntries(rows.map((r) => [r.task_id, { state: r.state, error: r.error }]));
}

/**
 * `run watch` without a terminal, replaying an ended run: a mapped task's instances are folded into
 * `mapped` progress lines with their counts (a few lines, not three a item), the last one counting
 * every instance.
 */
async function watchFoldsTheMap(url: string, runId: string, range: string, lastCounts: string): Promise<void> {
  const t0 = Date.now();
  const w = await cli(url, ['run', 'watch', runId], { timeoutMs: 60_000 });
  const lines = w.stdout.trim().split('\n');
  const progress = lines.filter((l) => l.includes(range) && / mapped /.test(l));
  expect(progress.length, w.stdout.slice(0, 2000)).toBeGreaterThan(0);
  expect(progress.at(-1)).toContain(lastCounts);
  expect(lines.filter((l) => /each\[\d+\] /.test(l))).toEqual([]);
  expect(lines.length, w.stdout.slice(0, 2000)).toBeLessThan(200);
  console.log(`run watch of ${range}: ${lines.length} lines in ${Date.now() - t0} ms`);
}

describe('mapped tasks on the subprocess executor', () => {
  it('maps 1, 20 and 1,000 items: one instance each, outputs in item order after; a clear maps afresh', async () => {
    const server = await start();
    for (const n of [1, 20, 1000]) {
      const dagId = `map_${n}`;
      const runId = await trigger(server.url, await mapDag(dagId, n), dagId);
      const ended = await runEnds(f.db.sql, runId, { timeoutMs: 150_000 }).catch(async (err: unknown) => {
        const hist = await f.db.sql`
          select task_id ~ '\\[' as mapped, state, pending_reason, count(*)::int as n from task_instances
          where run_id = ${runId} group by 1, 2, 3 order by 1, 2`;
        throw new Error(`${(err as Error).message}: ${JSON.stringify(hist)}`);
      });
      expect(ended).toBe('success');
      const inputs = JSON.parse(await readFile(path.join(f.tmp, `${dagId}-inputs.json`), 'utf8'));
      expect(inputs).toEqual({ each: Array.from({ length: n }, (_, i) => i) });
      const mapped = await f.db.sql<{ task_id: string; map_index: number; state: string; try_number: number }[]>`
        select task_id, map_index, state, try_number from task_instances
        where run_id = ${runId} and map_parent is not null order by map_index`;
      expect(mapped.length).toBe(n);
      expect(mapped.every((m, i) => m.task_id === `each[${i}]` && m.map_index === i)).toBe(true);
      expect(mapped.every((m) => m.state === 'success' && m.try_number === 1)).toBe(true);
      const [ev] = await f.db.sql<{ payload: { count: number } }[]>`
        select payload from events where run_id = ${runId} and kind = 'ti.expanded'`;
      expect(ev!.payload.count).toBe(n);
      if (n === 1000) await watchFoldsTheMap(server.url, runId, 'each[0..999]', '1000 success');
    }
    // Cleared with its downstream, the mapped task expands again from gen's output: the same items,
    // each on try 1 of a new instance, and the run succeeds again.
    const [run] = await f.db.sql<{ id: string }[]>`select id::text as id from dag_runs where dag_id = 'map_20'`;
    const clear = await cli(server.url, ['run', 'clear', run!.id, 'each', '--downstream']);
    expect(clear.code, clear.stderr).toBe(0);
    expect(await runEnds(f.db.sql, run!.id, { timeoutMs: 120_000 })).toBe('success');
    const again = await f.db.sql<{ n: number; tries: number }[]>`
      select count(*)::int as n, max(try_number)::int as tries from task_instances
      where run_id = ${run!.id} and map_parent is not null`;
    expect(again[0]).toEqual({ n: 20, tries: 1 });
    const [each] = await f.db.sql<{ state: string }[]>`
      select state from task_instances where run_id = ${run!.id} and task_id = 'each'`;
    expect(each!.state).toBe('success');
  }, 330_000);

  it('skips a map over an empty list, with the reason, and fails one over a list past the limit', async () => {
    const server = await start();
    const empty = await trigger(server.url, await mapDag('map_0', 0), 'map_0');
    expect(await runEnds(f.db.sql, empty)).toBe('success');
    const s0 = await states(empty);
    expect(s0.each).toEqual({
      state: 'skipped',
      error: 'task "each": map over "gen.items": the list is empty, nothing to run',
    });
    expect(s0.collect!.state).toBe('skipped');

    const over = await trigger(server.url, await mapDag('map_over', 100_001), 'map_over');
    expect(await runEnds(f.db.sql, over, { timeoutMs: 60_000 })).toBe('failed');
    const s1 = await states(over);
    expect(s1.gen!.state).toBe('success');
    expect(s1.each).toEqual({
      state: 'failed',
      error: 'task "each": map over "gen.items": a list of 100001 items, over the limit of 100000',
    });
    expect(s1.collect!.state).toBe('upstream_failed');
    const [{ n } = { n: -1 }] = await f.db.sql<{ n: number }[]>`
      select count(*)::int as n from task_instances where run_id = ${over} and map_parent is not null`;
    expect(n).toBe(0);
  }, 120_000);

  it('holds max_parallel: never more mapped instances in flight than it says, the rest saying why', async () => {
    const server = await start();
    const file = await mapDag('map_par', 6, { maxParallel: 2, each: 'sleep 0.4' });
    const runId = await trigger(server.url, file, 'map_par');
    let most = 0;
    let reason: string | null = null;
    await waitFor(
      'run ended',
      async () => {
        const rows = await f.db.sql<{ state: string; pending_reason: string | null }[]>`
          select state, pending_reason from task_instances where run_id = ${runId} and map_parent is not null`;
        most = Math.max(most, rows.filter((r) => ['scheduled', 'queued', 'running'].includes(r.state)).length);
        reason ??= rows.find((r) => r.pending_reason?.startsWith('MAX_PARALLEL'))?.pending_reason ?? null;
        const [run] = await f.db.sql<{ state: string }[]>`select state from dag_runs where id = ${runId}`;
        return run!.state === 'success' ? true : null;
      },
      60_000,
      20,
    );
    expect(most).toBe(2);
    expect(reason).toBe('MAX_PARALLEL:2');
  }, 90_000);

  it('gives each mapped instance its item where the list was in its inputs, not the whole list', async () => {
    const server = await start();
    const file = path.join(f.tmp, 'map_inputs.yaml');
    // gen's output holds the list and another key; each instance hands back its inputs and inputs: variable.
    const gen = `printf '{"bucket":"b","items":[5,7,42]}' > "$LEOFLOW_OUTPUT"`;
    const each = `printf '{"inputs":%s,"var":%s}' "$(cat "$LEOFLOW_INPUTS")" "$ITEM" > "$LEOFLOW_OUTPUT"`;
    await writeFile(
      file,
      [
        'dag_id: map_inputs',
        'tasks:',
        '  - id: gen',
        `    command: ["sh", "-c", ${JSON.stringify(gen)}]`,
        '  - id: each',
        `    command: ["sh", "-c", ${JSON.stringify(each)}]`,
        '    depends_on: [gen]',
        '    map: { over: gen.items }',
        '    inputs: { ITEM: gen.items }',
        '',
      ].join('\n'),
    );
    const runId = await trigger(server.url, file, 'map_inputs');
    expect(await runEnds(f.db.sql, runId, { timeoutMs: 60_000 })).toBe('success');
    const outs = await f.db.sql<{ task_id: string; value: unknown }[]>`
      select t.task_id, o.value from task_instances t join task_outputs o on o.ti_id = t.id
      where t.run_id = ${runId} and t.map_parent is not null order by t.map_index`;
    const items = [5, 7, 42];
    expect(outs.map((o) => o.value)).toEqual(
      items.map((item) => ({ inputs: { gen: { bucket: 'b', items: item } }, var: item })),
    );
  }, 90_000);

  it('expands 100,000 items in one batch and dispatches them by the normal path (a sample)', async () => {
    const server = await start();
    const runId = await trigger(server.url, await mapDag('map_100k', 100_000, { each: 'true' }), 'map_100k');
    const t0 = Date.now();
    await waitFor(
      '100,000 mapped instances',
      async () => {
        const [row] = await f.db.sql<{ map_count: number | null }[]>`
          select map_count from task_instances where run_id = ${runId} and task_id = 'each'`;
        return row?.map_count ?? null;
      },
      60_000,
      50,
    );
    const expandMs = Date.now() - t0;
    const [c] = await f.db.sql<{ n: number; distinct_i: number; lo: number; hi: number }[]>`
      select count(*)::int as n, count(distinct map_index)::int as distinct_i, min(map_index) as lo,
             max(map_index) as hi
      from task_instances where run_id = ${runId} and map_parent is not null`;
    expect(c).toEqual({ n: 100_000, distinct_i: 100_000, lo: 0, hi: 99_999 });
    // 100,000 process spawns take minutes on this machine: a sample of 20 runs to success, in item order first.
    const t1 = Date.now();
    await waitFor(
      '20 mapped instances succeeded',
      async () => {
        const [row] = await f.db.sql<{ n: number }[]>`
          select count(*)::int as n from task_instances
          where run_id = ${runId} and map_parent is not null and state = 'success'`;
        return row!.n >= 20 ? true : null;
      },
      150_000,
      200,
    );
    console.log(`100,000 items: expanded in ${expandMs} ms; 20 dispatched and succeeded in ${Date.now() - t1} ms`);
    expect(expandMs).toBeLessThan(30_000);
    expect((await cli(server.url, ['run', 'cancel', runId])).code).toBe(0);
    expect(await runEnds(f.db.sql, runId, { timeoutMs: 60_000 })).toBe('cancelled');
    await watchFoldsTheMap(server.url, runId, 'each[0..99999]', 'cancelled');
  }, 320_000);
});
