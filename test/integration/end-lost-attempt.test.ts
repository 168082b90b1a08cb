/**
 * An attempt the kubernetes executor saw lost, ended against real Postgres: a loss the task
 * caused spends a try like any other; a lost node's or an eviction's spends none.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { claimAttempt } from '../../src/db/attempts/claim-attempt.js';
import { endLostAttempt } from '../../src/db/attempts/end-lost-attempt.js';
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

let runSeq = 0;
/** A TI with no retries (one try allowed), claimed for its first try. */
async function claimedWithNoRetries() {
  const spec = dag('lost', [task('t', { executor: 'kubernetes', retries: 0 })]);
  const { dag: row } = await upsertDag(db.sql, spec, 'lost.yaml');
  const { run } = await db.sql.begin((tx) =>
    createRun(tx, {
      dagId: spec.dagId,
      dagVersion: row.version,
      runKey: `manual__${++runSeq}`,
      runType: 'manual',
      logicalDate: new Date(),
      conf: {},
      defaultExecutor: 'kubernetes',
    }),
  );
  const [ti] = await listTis(db.sql, run.id);
  await db.sql`update dag_runs set state = 'running' where id = ${run.id}`;
  await db.sql`update task_instances set state = 'scheduled' where id = ${ti!.id}`;
  const claim = (await claimAttempt(db.sql, ti!.id, 'kubernetes', null))!;
  return { tiId: ti!.id, tryNumber: claim.tryNumber, attemptToken: claim.attemptToken };
}

const row = async (tiId: string) =>
  (
    await db.sql<{ state: string; try_number: number; max_tries: number; retry_now: boolean }[]>`
      select state, try_number, max_tries, next_try_at <= now() as retry_now from task_instances where id = ${tiId}`
  )[0]!;

describe('endLostAttempt', () => {
  it('spends the last try on a loss the task caused: the TI fails', async () => {
    const a = await claimedWithNoRetries();
    expect(await endLostAttempt(db.sql, a, 'POD_DELETED: gone', 'pod_lost')).not.toBeNull();
    expect(await row(a.tiId)).toMatchObject({ state: 'failed', try_number: 1, max_tries: 1 });
  });

  it('spends no try on a lost node: the TI is retried at once, one more try allowed', async () => {
    const a = await claimedWithNoRetries();
    expect(await endLostAttempt(db.sql, a, 'POD_LOST:NodeNotReady', 'pod_disrupted', 3)).not.toBeNull();
    expect(await row(a.tiId)).toEqual({ state: 'up_for_retry', try_number: 1, max_tries: 2, retry_now: true });
    const [ev] = await db.sql<{ reason: string }[]>`
      select payload->>'reason' as reason from events where ti_id = ${a.tiId} order by seq desc limit 1`;
    expect(ev!.reason).toBe('pod_disrupted');
  });

  it('spends a try once its free retries are used (--max-free-retries, default 3), and says so', async () => {
    // The shipped default (pro-deployment.test.ts checks the manifests set it).
    const maxFree = 3;
    let a = await claimedWithNoRetries();
    for (let i = 1; i <= maxFree; i++) {
      expect(await endLostAttempt(db.sql, a, `POD_LOST:NodeNotReady ${i}`, 'pod_disrupted', maxFree)).not.toBeNull();
      expect(await row(a.tiId)).toMatchObject({ state: 'up_for_retry', try_number: i, max_tries: i + 1 });
      await db.sql`update task_instances set state = 'scheduled' where id = ${a.tiId}`;
      const claim = (await claimAttempt(db.sql, a.tiId, 'kubernetes', null))!;
      a = { tiId: a.tiId, tryNumber: claim.tryNumber, attemptToken: claim.attemptToken };
    }
    expect(await endLostAttempt(db.sql, a, 'POD_LOST:NodeNotReady again', 'pod_disrupted', maxFree)).not.toBeNull();
    expect(await row(a.tiId), 'the fourth loss spends the last try').toMatchObject({
      state: 'failed',
      try_number: maxFree + 1,
      max_tries: maxFree + 1,
    });
    const [ev] = await db.sql<{ error: string }[]>`
      select payload->>'error' as error from events where ti_id = ${a.tiId} order by seq desc limit 1`;
    expect(ev!.error).toBe(
      'POD_LOST:NodeNotReady again (spent a try: its 3 free retries for lost nodes and evictions are used, --max-free-retries)',
    );
  });
});
