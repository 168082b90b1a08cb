import { describe, expect, it } from 'vitest';
import { applyDag, expectRunSucceeds } from '../helpers/applied-dag.js';
import { proServerForFile } from '../helpers/fake-kube/pro-server-for-file.js';
import { echoMap, expectCollectedInItemOrder, mapDag } from '../helpers/map-dag.js';
import { expectMapSizes } from '../helpers/map-sizes.js';

/**
 * `map:` on the kubernetes executor (fake API server): each mapped instance runs in a pod of its
 * own whose `leoflow agent --once` gets its item and index in the Assign, and sends its output in
 * Finished; the downstream pod gets their list in item order.
 */
const NS = 'leoflow';
// Outputs up to 1 MiB: the 100,000-item list of the sizes case is ~590 KB.
const f = proServerForFile({
  namespace: NS,
  tmpPrefix: 'leoflow-kube-map-',
  args: ['--kill-grace', '2s', '--max-output-size', '1MiB'],
});

const ITEMS = ['a', { k: 'v $(touch PWNED) "q"' }, [1, 2], null];

describe('mapped tasks on the kubernetes executor', () => {
  it('runs a pod per item with its item, and hands the downstream pod their outputs in item order', async () => {
    await applyDag(
      f.server.url,
      f.tmp,
      mapDag({
        dagId: 'kube_map',
        ...echoMap(ITEMS),
      }),
    );
    const runId = (await f.api.workflow.triggerRun({ dagId: 'kube_map' })).run!.runId;
    await expectRunSucceeds(f.db.sql, runId, 90_000);

    const mapped = await f.db.sql<{ task_id: string; state: string }[]>`
      select task_id, state from task_instances where run_id = ${runId} and map_parent is not null order by map_index`;
    expect(mapped.map((m) => [m.task_id, m.state])).toEqual(ITEMS.map((_, i) => [`each[${i}]`, 'success']));
    for (const [i, item] of ITEMS.entries()) {
      const out = await f.api.workflow.getTaskOutput({ runId, taskId: `each[${i}]` });
      expect(out.outputs.map((o) => JSON.parse(o.json))).toEqual([{ i, item }]);
    }
    await expectCollectedInItemOrder(f.api, runId, ITEMS);
  }, 120_000);

  // Each pod is a process of its own (`leoflow agent --once`, ~0.3 s of CPU to start): 1,000 pods would
  // be minutes on this machine's two cores, so of the 100,000 a sample of 20 pods runs, 4 at a time.
  it('maps 0 and 1 items, and 100,000 in one batch of which 20 pods run, 4 at a time', async () => {
    await expectMapSizes(f, { prefix: 'kube_sizes', full: [], sample: 20, bigMaxParallel: 4 });
  }, 480_000);
});
