import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { currentLeader, currentLeaderId } from '../../src/db/leader.js';
import { createLeaderElector, LEADER_LOCK_KEY, type LeaderElector } from '../../src/scheduler/leader.js';
import { waitFor } from '../helpers/leoflow-process.js';
import { createTestDatabase, type TestDatabase } from '../helpers/test-database.js';

let db: TestDatabase;
const electors: LeaderElector[] = [];

beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  for (const e of electors) await e.stop();
  await db.drop();
});

function elector(
  replicaId: string,
  events: string[],
  stepReport?: () => { lastFullStepAt: number; lateMs: number } | null,
): LeaderElector {
  const e = createLeaderElector({
    stepReport,
    databaseUrl: db.url,
    replicaId,
    logger: pino({ level: 'silent' }),
    watchdogMs: 100,
    retryMs: 50,
    onElected: () => events.push(`${replicaId} elected`),
    onDeposed: (reason) => events.push(`${replicaId} deposed: ${reason}`),
  });
  electors.push(e);
  return e;
}

describe('leader election', () => {
  it('elects exactly one of two replicas; the standby takes over when the leader stops', async () => {
    const events: string[] = [];
    const a = elector('replica-a', events);
    a.start();
    await waitFor('a leads', async () => a.isLeader);
    const b = elector('replica-b', events);
    b.start();
    await new Promise((r) => setTimeout(r, 300));
    expect(b.isLeader).toBe(false);
    expect(await currentLeaderId(db.sql, LEADER_LOCK_KEY)).toBe('replica-a');

    await a.stop();
    await waitFor('b leads', async () => b.isLeader, 5000);
    expect(await currentLeaderId(db.sql, LEADER_LOCK_KEY)).toBe('replica-b');
    expect(events).toEqual(['replica-a elected', 'replica-a deposed: stopping', 'replica-b elected']);
    await b.stop();
  });

  it("tells the other replicas its loop's last full step through its lock session, at each watchdog check", async () => {
    let report: { lastFullStepAt: number; lateMs: number } | null = null;
    const d = elector('replica-d', [], () => report);
    d.start();
    await waitFor('d leads', async () => d.isLeader);
    expect(await currentLeader(db.sql, LEADER_LOCK_KEY)).toEqual({ replicaId: 'replica-d', report: null });
    report = { lastFullStepAt: Date.parse('2026-11-27T04:00:00.000Z'), lateMs: 0 };
    await waitFor(
      'the report read',
      async () => (await currentLeader(db.sql, LEADER_LOCK_KEY))?.report !== null,
      2000,
      20,
    );
    expect((await currentLeader(db.sql, LEADER_LOCK_KEY))!.report).toEqual({
      lastFullStepAt: new Date('2026-11-27T04:00:00.000Z'),
      lateMs: 0,
    });
    report = { lastFullStepAt: Date.parse('2026-11-27T04:00:00.000Z'), lateMs: 4500 };
    await waitFor(
      'the lateness read',
      async () => (await currentLeader(db.sql, LEADER_LOCK_KEY))?.report?.lateMs === 4500,
      2000,
      20,
    );
    await d.stop();
  });

  it('notices at once when its lock session is killed, and campaigns again', async () => {
    const events: string[] = [];
    const c = elector('replica-c', events);
    c.start();
    await waitFor('c leads', async () => c.isLeader);
    // Kill the lock session from the server side, as a failover or a network cut would.
    await db.sql`select pg_terminate_backend(pid) from pg_stat_activity where application_name like 'leoflow:replica-c%'`;
    await waitFor('c deposed', async () => events.some((e) => e.startsWith('replica-c deposed')), 5000);
    await waitFor('c leads again', async () => c.isLeader, 5000);
    expect(events.filter((e) => e === 'replica-c elected')).toHaveLength(2);
    await c.stop();
  });
});
