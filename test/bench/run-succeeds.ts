import type { Sql } from '../../src/db/sql.js';
import { runEnds } from '../helpers/run-ends.js';

/** Polls the run every `everyMs` until it ends; throws unless it ended in success, or past the timeout. */
export async function runSucceeds(sql: Sql, runId: string, timeoutMs: number, everyMs: number): Promise<void> {
  const state = await runEnds(sql, runId, { timeoutMs, everyMs });
  if (state !== 'success') throw new Error(`run ${runId} ended ${state}`);
}
