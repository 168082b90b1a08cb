import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { expect } from 'vitest';
import { createClients } from '../../src/cli/client.js';
import { getDag } from '../../src/db/dags.js';
import { createRun } from '../../src/db/runs.js';
import type { Sql } from '../../src/db/sql.js';
import { cli } from '../helpers/leoflow-process.js';

/**
 * The throughput workload (throughput, agent-tasks, stall-hunt, profile): N runs of `tp`, a DAG of
 * one task (`executor: agents`, `true`), queued while it is paused, so that the window opens when
 * it is unpaused with the agent already connected. One run is one job of the peers: its own row,
 * trigger, state history and events.
 */

/** Writes `tp.yaml` into `dir`, applies it with the CLI, and pauses `tp` if asked. */
export async function applyThroughputDag(
  url: string,
  dir: string,
  opts: { paused: boolean; maxActiveRuns?: number },
): Promise<void> {
  const file = path.join(dir, 'tp.yaml');
  const head = `dag_id: tp\nmax_active_runs: ${opts.maxActiveRuns ?? 100_000}\n`;
  await writeFile(file, head + 'tasks:\n  - id: t\n    executor: agents\n    command: ["true"]\n');
  expect((await cli(url, ['dag', 'apply', file])).code).toBe(0);
  if (opts.paused) await createClients(url).workflow.pauseDag({ dagId: 'tp', paused: true });
}

/** Queues n runs of `tp` (run keys `${runKeyPrefix}${i}`) with the function TriggerRun calls
 *  (createRun), 500 to a transaction, so queueing 10,000 takes seconds; the API's own rate is
 *  measured separately. */
export async function queueThroughputRuns(sql: Sql, n: number, runKeyPrefix: string): Promise<void> {
  const dag = (await getDag(sql, 'tp'))!;
  for (let i = 0; i < n; i += 500) {
    await sql.begin(async (tx) => {
      for (let j = i; j < Math.min(n, i + 500); j++) {
        await createRun(tx, {
          dagId: 'tp',
          dagVersion: dag.version,
          runKey: `${runKeyPrefix}${j}`,
          runType: 'manual',
          logicalDate: new Date(),
          conf: {},
          defaultExecutor: 'subprocess',
        });
      }
    });
  }
}
