import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { currentLeaderId } from '../../src/db/leader.js';
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

function elector(replicaId: string, events: string[]): LeaderElector {
  const e = createLeaderElector({
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

  it('notices at once when its lock session is killed, and campaigns again', async () => {
    const events: string[] = [];
    const c = elector('replica-c', events);
    c.start();
    await waitFor('c leads', async () => c.isLeader);
    // Kill the lock session from the server side, as a failover or a network cut would.
    await db.sql`select pg_terminate_backend(pid) from pg_stat_activity where application_name = 'leoflow:replica-c'`;
    await waitFor('c deposed', async () => events.some((e) => e.startsWith('replica-c deposed')), 5000);
    await waitFor('c leads again', async () => c.isLeader, 5000);
    expect(events.filter((e) => e === 'replica-c elected')).toHaveLength(2);
    await c.stop();
  });
});
