import { DBOS } from '@dbos-inc/dbos-sdk';
import { createTestDatabase } from '../test/helpers/test-database.js';
import { STATS_SETTLE_MS, sleep, xacts } from '../test/bench/pg-xacts.js';
import {
  CHAIN,
  type DurablePeerResult,
  type InFlightResult,
  inFlight,
  medianChain,
  spawnTrue,
  startLatency,
  stepStats,
} from './durable-peer.js';

/**
 * DBOS Transact on the suite's Postgres, in a database of its own (its system database): each
 * workflow and each step is checkpointed there, by the process that runs them. Workflows are
 * started directly (no queue), the library's own way of running one at once; a queue would add
 * its polling interval (1 s by default) to every start.
 */

export const DBOS_VERSION = '@dbos-inc/dbos-sdk 5.3.0';

let chainStarts: number[] = [];
let onStep: (() => void) | null = null;

const chain = DBOS.registerWorkflow(
  async (spawnEach: boolean) => {
    for (let i = 0; i < CHAIN; i++) {
      await DBOS.runStep(
        async () => {
          chainStarts.push(performance.now());
          if (spawnEach) await spawnTrue();
        },
        { name: `step-${i}` },
      );
    }
  },
  { name: 'chain' },
);

const oneStep = DBOS.registerWorkflow(async () => DBOS.runStep(async () => onStep?.(), { name: 'only' }), {
  name: 'one-step',
});

export async function dbosTransact(workflows: number, concurrency: number[]): Promise<DurablePeerResult> {
  const db = await createTestDatabase();
  DBOS.setConfig({ name: 'leoflow-bench', systemDatabaseUrl: db.url, logLevel: 'error' });
  await DBOS.launch();
  try {
    const runChain = (spawnEach: boolean) => async () => {
      chainStarts = [];
      await chain(spawnEach);
      return stepStats(chainStarts);
    };
    const noop = await medianChain(runChain(false));
    const spawning = await medianChain(runChain(true));

    const throughput: InFlightResult[] = [];
    for (const c of concurrency) {
      await sleep(STATS_SETTLE_MS);
      const x0 = await xacts(db.sql, db.name);
      const { done, windowMs } = await inFlight(workflows, c, () => oneStep());
      await sleep(STATS_SETTLE_MS);
      const x1 = await xacts(db.sql, db.name);
      throughput.push({
        concurrency: c,
        workflows,
        done,
        perSec: done / (windowMs / 1000),
        xactPerWorkflow: (x1 - x0 - 1) / done,
        windowMs,
      });
    }

    const latency = await startLatency(async (entered) => {
      onStep = entered;
      const handle = await DBOS.startWorkflow(oneStep)();
      await handle.getResult();
    });
    onStep = null;
    return {
      peer: DBOS_VERSION,
      config: 'system database on the same Postgres, workflows started directly (no queue), logLevel error',
      chain: noop,
      spawnChain: spawning,
      throughput,
      latency,
    };
  } finally {
    await DBOS.shutdown();
    await db.drop();
  }
}
