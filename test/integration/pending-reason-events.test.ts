import { createContextValues } from '@connectrpc/connect';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { setPendingReasons } from '../../src/db/tis.js';
import { workflowServiceOn } from '../helpers/workflow-service-on.js';
import { createTestDatabase, type TestDatabase } from '../helpers/test-database.js';

/** A waiting task's reason, as it changes, is in the events log for watchers (issue 26); an unchanged one writes nothing. */

let db: TestDatabase;

beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  await db?.drop();
});

describe('pending reasons in the events log', () => {
  it('records each change of a waiting task reason once, with its task and try', async () => {
    const w = workflowServiceOn(db.sql) as unknown as Record<
      string,
      (req: unknown, ctx: unknown) => Promise<{ run: { runId: string } }>
    >;
    const ctx = { signal: new AbortController().signal, requestHeader: new Headers(), values: createContextValues() };
    await w.applyDag!({ source: 'dag_id: p\ntasks:\n  - id: a\n    command: ["true"]\n', filename: 'p.yaml' }, ctx);
    const { run } = await w.triggerRun!({ dagId: 'p', confJson: '', runKey: '' }, ctx);
    const [ti] = await db.sql<{ id: string }[]>`select id::text as id from task_instances where run_id = ${run.runId}`;
    await setPendingReasons(db.sql, new Map([[ti!.id, 'NO_AGENT_MATCHES']]));
    await setPendingReasons(db.sql, new Map([[ti!.id, 'NO_AGENT_MATCHES']]));
    await setPendingReasons(db.sql, new Map([[ti!.id, 'NO_FREE_SLOT']]));
    const rows = await db.sql<{ payload: { task_id: string; reason: string } }[]>`
      select payload from events where run_id = ${run.runId} and kind = 'ti.pending' order by seq`;
    expect(rows.map((r) => [r.payload.task_id, r.payload.reason])).toEqual([
      ['a', 'NO_AGENT_MATCHES'],
      ['a', 'NO_FREE_SLOT'],
    ]);
  });
});
