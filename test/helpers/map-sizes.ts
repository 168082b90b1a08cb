import { expect } from 'vitest';
import { applyDag, expectRunSucceeds } from './applied-dag.js';
import { waitFor } from './leoflow-process.js';
import { echoMap, expectCollectedInItemOrder, mapDag, sh } from './map-dag.js';
import { runEnds } from './run-ends.js';
import type { ServerFixture } from './server-fixture.js';

/** The most items a map may have (dag-reference), and the biggest list the issue asks of every executor. */
export const MAP_LIMIT = 100_000;

/**
 * The map sizes every executor is held to, on a server whose tasks run where `taskLines` say
 * (`executor: agents`, or the kubernetes executor by default on Pro):
 * - 0 items: `each` is skipped with the reason, and so is `collect`; the run succeeds;
 * - 1 item and each of `full`: one instance an item, each succeeds, `collect` gets them in item order;
 * - MAP_LIMIT items: expanded in one batch (every index once), and the first `sample` run to success
 *   through this executor before the run is cancelled (all of them would take minutes of process starts).
 * The server needs `--max-output-size 1MiB`: the list is ~590 KB.
 */
export async function expectMapSizes(
  f: ServerFixture,
  o: { prefix: string; taskLines?: string[]; full: number[]; sample: number; bigMaxParallel?: number },
): Promise<void> {
  for (const n of [0, 1, ...o.full]) {
    const items = Array.from({ length: n }, (_, i) => i);
    const dagId = await applyDag(
      f.server.url,
      f.tmp,
      mapDag({ dagId: `${o.prefix}_${n}`, taskLines: o.taskLines, ...echoMap(items) }),
    );
    const runId = (await f.api.workflow.triggerRun({ dagId })).run!.runId;
    await expectRunSucceeds(f.db.sql, runId, 180_000);
    const rows = await f.db.sql<{ task_id: string; state: string; error: string | null; mapped: boolean }[]>`
      select task_id, state, error, map_parent is not null as mapped from task_instances where run_id = ${runId}`;
    const mapped = rows.filter((r) => r.mapped);
    if (n === 0) {
      const each = rows.find((r) => r.task_id === 'each');
      expect(each).toMatchObject({ state: 'skipped', error: expect.stringContaining('the list is empty') });
      expect(rows.find((r) => r.task_id === 'collect')?.state).toBe('skipped');
      expect(mapped).toEqual([]);
      continue;
    }
    expect(mapped.length).toBe(n);
    expect(mapped.every((m) => m.state === 'success')).toBe(true);
    await expectCollectedInItemOrder(f.api, runId, items);
  }

  const gen = `seq 0 ${MAP_LIMIT - 1} | paste -sd, - | sed 's/^/{"items":[/; s/$/]}/' > "$LEOFLOW_OUTPUT"`;
  const dagId = await applyDag(
    f.server.url,
    f.tmp,
    mapDag({
      dagId: `${o.prefix}_big`,
      taskLines: o.taskLines,
      gen: sh(gen),
      each: ['true'],
      collect: ['true'],
      maxParallel: o.bigMaxParallel,
    }),
  );
  const runId = (await f.api.workflow.triggerRun({ dagId })).run!.runId;
  const count = async () => {
    const [r] = await f.db.sql<{ n: number; distinct_i: number; lo: number; hi: number; ok: number }[]>`
      select count(*)::int as n, count(distinct map_index)::int as distinct_i, min(map_index) as lo,
             max(map_index) as hi, (count(*) filter (where state = 'success'))::int as ok
      from task_instances where run_id = ${runId} and map_parent is not null`;
    return r!;
  };
  await waitFor('the big map expanded', async () => ((await count()).n > 0 ? true : null), 120_000, 100);
  // One batch: the first look that sees an instance sees them all.
  expect(await count()).toMatchObject({ n: MAP_LIMIT, distinct_i: MAP_LIMIT, lo: 0, hi: MAP_LIMIT - 1 });
  await waitFor(
    `${o.sample} mapped instances succeeded`,
    async () => ((await count()).ok >= o.sample ? true : null),
    150_000,
    200,
  );
  await f.api.workflow.cancelRun({ runId });
  expect(await runEnds(f.db.sql, runId, { timeoutMs: 60_000 })).toBe('cancelled');
}
