import type { Sql } from '../../src/db/sql.js';
import { waitFor } from './leoflow-process.js';
import { isRunEnded } from './run-ends.js';

/**
 * Polls until every run of `runIds` has ended (TERMINAL_RUN_STATES) and resolves with their
 * states, in id order; throws past the timeout (20 s unless given), saying `what` it waited for.
 */
export async function runsEnd(
  sql: Sql,
  runIds: readonly string[],
  timeoutMs = 20_000,
  what = 'all runs ended',
): Promise<string[]> {
  return waitFor(
    what,
    async () => {
      const rows = await sql<
        { state: string }[]
      >`select state from dag_runs where id = any(${runIds as string[]}::bigint[]) order by id`;
      return rows.every((r) => isRunEnded(r.state)) && rows.map((r) => r.state);
    },
    timeoutMs,
  );
}
