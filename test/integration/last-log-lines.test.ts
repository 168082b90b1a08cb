/**
 * A failed pod's error quotes its task's last lines from the store: the task's own, of that try,
 * oldest first, without Leoflow's `system` lines.
 */
import { afterAll, beforeAll, expect, it } from 'vitest';
import { lastLogLines } from '../../src/db/attempts/last-log-lines.js';
import { upsertDag } from '../../src/db/dags.js';
import { createRun } from '../../src/db/runs.js';
import { listTis } from '../../src/db/tis.js';
import { dag, task } from '../helpers/spec-builders.js';
import { createTestDatabase, type TestDatabase } from '../helpers/test-database.js';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  await db.drop();
});

it("reads the last lines of one try's task, oldest first, without system lines", async () => {
  const spec = dag('tail', [task('t', { executor: 'kubernetes' })]);
  const { dag: row } = await upsertDag(db.sql, spec, 'tail.yaml');
  const { run } = await db.sql.begin((tx) =>
    createRun(tx, {
      dagId: spec.dagId,
      dagVersion: row.version,
      runKey: 'manual__1',
      runType: 'manual',
      logicalDate: new Date(),
      conf: {},
      defaultExecutor: 'kubernetes',
    }),
  );
  const [ti] = await listTis(db.sql, run.id);
  const lines = [
    [1, 1, 'stdout', 'first try'],
    [2, 1, 'stdout', 'line 1'],
    [2, 2, 'system', 'attempt started on pod lf-x'],
    [2, 3, 'stderr', 'line 2'],
    [2, 4, 'stdout', 'line 3'],
  ] as const;
  for (const [tryNumber, seq, stream, line] of lines)
    await db.sql`insert into task_logs (ti_id, try_number, seq, stream, line)
      values (${ti!.id}, ${tryNumber}, ${seq}, ${stream}, ${line})`;
  expect(await lastLogLines(db.sql, { tiId: ti!.id, tryNumber: 2 }, 2)).toEqual(['line 2', 'line 3']);
  expect(await lastLogLines(db.sql, { tiId: ti!.id, tryNumber: 2 }, 20)).toEqual(['line 1', 'line 2', 'line 3']);
  expect(await lastLogLines(db.sql, { tiId: ti!.id, tryNumber: 3 }, 20)).toEqual([]);
});
