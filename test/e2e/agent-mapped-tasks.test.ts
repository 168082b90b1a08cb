import { existsSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { applyDag, expectRunSucceeds } from '../helpers/applied-dag.js';
import { EACH_INDEX_AND_ITEM, echoMap, expectCollectedInItemOrder, mapDag, sh } from '../helpers/map-dag.js';
import { expectMapSizes } from '../helpers/map-sizes.js';
import { agentsOfEachTest, serverForFile } from '../helpers/server-fixture.js';

/**
 * `map:` through a standalone agent (`leoflow agent`): each mapped instance's Assign carries its
 * item and index (LEOFLOW_MAP_ITEM, LEOFLOW_MAP_INDEX), the agent sends each one's output in
 * Finished, and the downstream's Assign carries their list in item order.
 */
// Outputs up to 1 MiB: the 100,000-item list of the sizes case is ~590 KB.
const f = serverForFile({ tmpPrefix: 'leoflow-agent-map-', args: ['--max-output-size', '1MiB'] });
const agents = agentsOfEachTest(f);

/** Items of several JSON kinds, one a string that would run a command if it reached a shell unquoted. */
const ITEMS = ['a', 7, { k: 'v $(touch PWNED) "q"' }, [1, 2], null, 'last\nline'];
// Item 3's first try fails after writing an output: its retry's output is the one handed on.
const EACH = [
  EACH_INDEX_AND_ITEM,
  `if [ "$LEOFLOW_MAP_INDEX" = 3 ] && [ "$LEOFLOW_TRY_NUMBER" = 1 ]; then`,
  `  echo '"first"' > "$LEOFLOW_OUTPUT"; exit 3`,
  'fi',
].join('\n');

describe('mapped tasks on an agent', () => {
  it('runs one instance per item with its item, and hands the downstream their outputs in item order', async () => {
    await applyDag(
      f.server.url,
      f.tmp,
      mapDag({
        dagId: 'agent_map',
        taskLines: ['executor: agents'],
        ...echoMap(ITEMS),
        each: sh(`cd "${f.tmp}"\n${EACH}`),
        eachLines: ['retries: 1', 'retry_delay: 1s'],
      }),
    );
    await agents.connect('map-agent', ['--slots', '4']);
    const runId = (await f.api.workflow.triggerRun({ dagId: 'agent_map' })).run!.runId;
    await expectRunSucceeds(f.db.sql, runId, 60_000);

    const mapped = await f.db.sql<{ task_id: string; state: string; agent_id: string | null; try_number: number }[]>`
      select task_id, state, agent_id, try_number from task_instances
      where run_id = ${runId} and map_parent is not null order by map_index`;
    expect(mapped.map((m) => [m.task_id, m.state, m.agent_id, m.try_number])).toEqual(
      ITEMS.map((_, i) => [`each[${i}]`, 'success', 'map-agent', i === 3 ? 2 : 1]),
    );
    for (const [i, item] of ITEMS.entries()) {
      // Newest try first: item 3 keeps its failed first try's output beside its retry's.
      const out = await f.api.workflow.getTaskOutput({ runId, taskId: `each[${i}]` });
      expect(out.outputs.map((o) => JSON.parse(o.json))).toEqual(i === 3 ? [{ i, item }, 'first'] : [{ i, item }]);
    }
    await expectCollectedInItemOrder(f.api, runId, ITEMS);
    expect(existsSync(path.join(f.tmp, 'PWNED'))).toBe(false);
  }, 90_000);

  it('maps 0, 1, 1,000 and 100,000 items through the agent (of 100,000, a sample of 20 run)', async () => {
    await agents.connect('sizes-agent', ['--slots', '8']);
    await expectMapSizes(f, { prefix: 'agent_sizes', taskLines: ['executor: agents'], full: [1000], sample: 20 });
  }, 480_000);
});
