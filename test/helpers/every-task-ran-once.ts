import { readFile } from 'node:fs/promises';
import { expect } from 'vitest';
import type { Sql } from '../../src/db/sql.js';

/**
 * Expects what a control plane handed over without losing an attempt leaves: every run of
 * `runIds` succeeded, no task instance past try 1, nothing declared lost, and `ledger` (one line
 * a task appended per attempt) holds `total` lines, all different. Resolves with those lines.
 */
export async function expectEveryTaskRanOnce(
  sql: Sql,
  runIds: readonly string[],
  ledger: string,
  total: number,
): Promise<string[]> {
  const ids = runIds as string[];
  const runs = await sql<{ state: string }[]>`select state from dag_runs where id = any(${ids}::bigint[]) order by id`;
  expect(runs.map((r) => r.state)).toEqual(runIds.map(() => 'success'));
  const retried = await sql<{ task_id: string; try_number: number }[]>`
    select task_id, try_number from task_instances where run_id = any(${ids}::bigint[]) and try_number <> 1`;
  expect(retried).toEqual([]);
  expect(await sql`select ti_id from events where payload->>'reason' = 'agent_lost'`).toEqual([]);
  const lines = (await readFile(ledger, 'utf8')).trim().split('\n');
  expect(lines.length).toBe(total);
  expect(new Set(lines).size).toBe(total);
  return lines;
}
