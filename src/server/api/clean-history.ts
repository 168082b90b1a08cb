import { keptRunsFrom } from '../../db/history/kept-runs-from.js';
import { pageOfFinishedRuns } from '../../db/history/page-of-finished-runs.js';
import { addCounts, countRuns, NO_HISTORY, removeRuns, type HistoryRowCounts } from '../../db/history/remove-runs.js';
import type { Sql } from '../../db/sql.js';

/** Runs read per batch, and the task instances one batch removes at most (with their runs). */
const SCAN_RUNS = 1000;
const MAX_TIS_PER_BATCH = 5000;

export interface CleanQuery {
  /** Runs that ended before this time; absent: whenever they ended. */
  endedBefore?: Date;
  dagId?: string;
  /** Each DAG's latest finished runs kept whatever their age; absent or 0: none. */
  keepLast?: number;
  dryRun: boolean;
}

/** Per DAG, the run id from which on `--keep-last` keeps its runs; undefined when none are kept. */
export async function keptFor(sql: Sql, q: CleanQuery): Promise<Map<string, string> | undefined> {
  return q.keepLast ? keptRunsFrom(sql, q.keepLast, q.dagId) : undefined;
}

/**
 * Removes (or, dry, counts) the finished runs a query names, with their task instances, events
 * and log lines, a batch at a time, each batch one transaction: a clean of years of history never
 * holds one transaction open for long nor locks more than a batch. Runs that have not ended are
 * never touched.
 */
export async function cleanHistory(sql: Sql, q: CleanQuery): Promise<HistoryRowCounts> {
  let total = NO_HISTORY;
  for await (total of cleanBatches(sql, q, await keptFor(sql, q)));
  return total;
}

/**
 * `cleanHistory` a batch at a time: yields the totals so far after each batch has committed, so
 * a caller can show progress, and stop between batches (by returning) with exactly those removed.
 */
export async function* cleanBatches(
  sql: Sql,
  q: CleanQuery,
  keptFrom: Map<string, string> | undefined,
): AsyncGenerator<HistoryRowCounts, void> {
  let total = NO_HISTORY;
  let after = '0';
  for (;;) {
    const page = await pageOfFinishedRuns(sql, {
      endedBefore: q.endedBefore,
      dagId: q.dagId,
      after,
      scan: SCAN_RUNS,
      maxTis: MAX_TIS_PER_BATCH,
      keptFrom,
    });
    const guard = { endedBefore: q.endedBefore };
    total = addCounts(total, await (q.dryRun ? countRuns(sql, page.ids, guard) : removeRuns(sql, page.ids, guard)));
    yield total;
    if (page.next === null) return;
    after = page.next;
  }
}
