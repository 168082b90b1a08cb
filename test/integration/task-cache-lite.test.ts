import { readFile, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { createClients } from '../../src/cli/client.js';
import { cli } from '../helpers/leoflow-process.js';
import { runEnds } from '../helpers/run-ends.js';
import { replicasForFile } from '../helpers/server-fixture.js';

/**
 * The completion cache on a Lite server (subprocess executor, shipped defaults): `make` appends a
 * line to a file each time its process runs, so the file counts the runs; `use` records its inputs.
 */
const f = replicasForFile({ tmpPrefix: 'leoflow-cache-' });
const start = f.launcher([]);

async function script(name: string, body: string): Promise<string> {
  const file = path.join(f.tmp, name);
  await writeFile(file, `#!/bin/sh\nset -e\n${body}\n`, { mode: 0o755 });
  return file;
}

async function ranTimes(): Promise<number> {
  const text = await readFile(path.join(f.tmp, 'ran'), 'utf8').catch(() => '');
  return text.split('\n').filter(Boolean).length;
}

async function trigger(url: string, conf: object, extra: string[] = []): Promise<string> {
  const t = await cli(url, ['run', 'trigger', 'cached', '--conf', JSON.stringify(conf), '-o', 'json', ...extra]);
  expect(t.code, t.stderr).toBe(0);
  return JSON.parse(t.stdout).run_id as string;
}

async function apply(url: string, sleep: string): Promise<void> {
  const make = await script(
    'make.sh',
    `echo "$LEOFLOW_RUN_ID" >> "${path.join(f.tmp, 'ran')}"\nsleep ${sleep}\n` +
      `printf '{"made": "%s", "by": "%s"}' "$DAY" "$LEOFLOW_RUN_ID" > "$LEOFLOW_OUTPUT"`,
  );
  const use = await script('use.sh', `cp "$LEOFLOW_INPUTS" "${path.join(f.tmp, 'inputs-')}$LEOFLOW_RUN_ID.json"`);
  const file = path.join(f.tmp, 'cached.yaml');
  await writeFile(
    file,
    [
      'dag_id: cached',
      'tasks:',
      '  - id: make',
      `    command: ["${make}"]`,
      '    env: { DAY: "x" }',
      '    cache: { key: [conf.day], ttl: 7d }',
      '  - id: use',
      `    command: ["${use}"]`,
      '    depends_on: [make]',
      '',
    ].join('\n'),
  );
  expect((await cli(url, ['dag', 'apply', file])).code).toBe(0);
}

async function inputsSeen(runId: string): Promise<unknown> {
  return JSON.parse(await readFile(path.join(f.tmp, `inputs-${runId}.json`), 'utf8'));
}

describe('the completion cache on the subprocess executor', () => {
  it('reuses a success: the task does not run, its downstream gets the cached value; --no-cache runs it', async () => {
    const server = await start();
    await apply(server.url, '0');
    const first = await trigger(server.url, { day: '2026-11-01' });
    expect(await runEnds(f.db.sql, first)).toBe('success');
    expect(await ranTimes()).toBe(1);

    const second = await trigger(server.url, { day: '2026-11-01' });
    expect(await runEnds(f.db.sql, second)).toBe('success');
    expect(await ranTimes()).toBe(1);
    expect(await inputsSeen(second)).toEqual({ make: { made: 'x', by: first } });
    const [hit] = await f.db.sql<{ source_run_id: string; source_try: number }[]>`
      select h.source_run_id, h.source_try from task_cache_hits h join task_instances t on t.id = h.ti_id
      where t.run_id = ${second} and t.task_id = 'make'`;
    expect(hit).toEqual({ source_run_id: first, source_try: 1 });
    const events = await f.db.sql<{ kind: string; payload: { reason: string } }[]>`
      select kind, payload from events where run_id = ${second} and kind = 'ti.cached'`;
    expect(events).toHaveLength(1);
    expect(events[0]!.payload.reason).toContain(`run ${first}`);
    // WatchRun's source: the first run's make recorded an output (ti.output, its size), the second's
    // came from the cache (ti.cached above, and its success move says so).
    const outputEvents = await f.db.sql<{ run_id: string; payload: { task_id: string; size_bytes: number } }[]>`
      select run_id, payload from events where run_id in (${first}, ${second}) and kind = 'ti.output' order by seq`;
    expect(outputEvents.map((e) => [e.run_id, e.payload.task_id])).toEqual([[first, 'make']]);
    const [moved] = await f.db.sql<{ payload: { cached: boolean; reason: string } }[]>`
      select e.payload from events e where e.run_id = ${second} and e.kind = 'ti.state'
        and e.payload ->> 'task_id' = 'make' and e.payload ->> 'to' = 'success'`;
    expect(moved!.payload.cached).toBe(true);
    // GetRun with outputs: the cached try's output, and where it came from.
    const got = await createClients(server.url).workflow.getRun({ runId: second, withOutputs: true });
    const make = got.taskInstances.find((t) => t.taskId === 'make')!;
    expect([JSON.parse(make.outputJson), make.cachedFromRunId, make.cachedFromTry]).toEqual([
      { made: 'x', by: first },
      first,
      1,
    ]);
    const plain = await createClients(server.url).workflow.getRun({ runId: second });
    expect(plain.taskInstances.every((t) => t.outputJson === '' && t.outputSizeBytes === 0)).toBe(true);

    // Another key runs it; --no-cache runs it even with a cached key, and refreshes the entry.
    const other = await trigger(server.url, { day: '2026-11-02' });
    expect(await runEnds(f.db.sql, other)).toBe('success');
    expect(await ranTimes()).toBe(2);
    const fresh = await trigger(server.url, { day: '2026-11-01' }, ['--no-cache']);
    expect(await runEnds(f.db.sql, fresh)).toBe('success');
    expect(await ranTimes()).toBe(3);
    const after = await trigger(server.url, { day: '2026-11-01' });
    expect(await runEnds(f.db.sql, after)).toBe('success');
    expect(await ranTimes()).toBe(3);
    expect(await inputsSeen(after)).toEqual({ make: { made: 'x', by: fresh } });

    // run clear --no-cache runs a cleared cached task again.
    const c = await cli(server.url, ['run', 'clear', after, 'make', '--downstream', '--no-cache']);
    expect(c.code, c.stderr).toBe(0);
    expect(await runEnds(f.db.sql, after)).toBe('success');
    expect(await ranTimes()).toBe(4);
  });

  it('runs the task once for two runs racing on one key: the other waits, saying so, and takes its result', async () => {
    const server = await start();
    await rm(path.join(f.tmp, 'ran'), { force: true });
    await apply(server.url, '2');
    const day = { day: '2026-12-24' };
    const a = await trigger(server.url, day);
    const b = await trigger(server.url, day);
    const reasons: string[] = [];
    const deadline = Date.now() + 20_000;
    while (Date.now() < deadline) {
      const rows = await f.db.sql<{ pending_reason: string | null }[]>`
        select pending_reason from task_instances where run_id in (${a}, ${b}) and task_id = 'make'`;
      reasons.push(...rows.flatMap((r) => (r.pending_reason ? [r.pending_reason] : [])));
      if (reasons.some((r) => r.startsWith('CACHE_WAIT'))) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    expect(reasons.some((r) => r.startsWith('CACHE_WAIT') && r.includes('same cache key'))).toBe(true);
    expect(await runEnds(f.db.sql, a)).toBe('success');
    expect(await runEnds(f.db.sql, b)).toBe('success');
    expect(await ranTimes()).toBe(1);
    const ran = (await readFile(path.join(f.tmp, 'ran'), 'utf8')).trim();
    const waiter = ran === a ? b : a;
    expect(await inputsSeen(waiter)).toEqual({ make: { made: 'x', by: ran } });
  });
});
