/**
 * Giving back an attempt that an agent stream could not take, against real Postgres: released
 * while no other session of the agent holds it (that session may have sent the attempt already),
 * with the agent's row locked so a session opening at the same moment is either seen or reads the
 * attempt after it was given back. And a stopping replica's agents shown disconnected at once.
 */
import { randomUUID } from 'node:crypto';
import { beforeEach, describe, expect, it } from 'vitest';
import { connectAgent, disconnectReplica } from '../../src/db/agents.js';
import { releaseUndelivered } from '../../src/db/attempts/release-undelivered.js';
import { dag, task } from '../helpers/spec-builders.js';
import { databaseForFile } from '../helpers/test-database.js';
import { attemptFixtures } from '../helpers/attempt-fixtures.js';

const db = databaseForFile();
beforeEach(async () => {
  await db.sql`delete from agents`;
});

const fixtures = attemptFixtures(() => db.sql, 'agents');
/** A TI claimed for agent `agentId` (queued, try 1): the attempt an Assign would carry. */
const claimedFor = (agentId: string) =>
  fixtures.claimedFor(agentId, dag('undelivered', [task('t', { executor: 'agents' })]));

const connect = (agentId: string, replicaId: string, sessionId: string) =>
  connectAgent(db.sql, {
    agentId,
    labels: {},
    capabilities: [],
    slots: 1,
    replicaId,
    sessionId,
    protocolVersion: 2,
    incarnationId: randomUUID(),
    liveMs: 15_000,
  });

async function tiState(tiId: string) {
  const [row] = await db.sql<
    { state: string; try_number: number; agent_id: string | null; pending_reason: string | null }[]
  >`
    select state, try_number, agent_id, pending_reason from task_instances where id = ${tiId}`;
  return row!;
}

describe('releaseUndelivered', () => {
  it('gives back the attempt when the session that could not take it is the one holding the agent', async () => {
    const s1 = randomUUID();
    await connect('x1', 'r1', s1);
    const a = await claimedFor('x1');
    expect(await releaseUndelivered(db.sql, a, s1, 'AGENT_GONE:x1')).toEqual({ released: true, heldBy: null });
    expect(await tiState(a.tiId)).toEqual({
      state: 'scheduled',
      try_number: 0,
      agent_id: null,
      pending_reason: 'AGENT_GONE:x1',
    });
    const [ev] = await db.sql<
      { payload: Record<string, unknown> }[]
    >`select payload from events where ti_id = ${a.tiId} order by seq desc limit 1`;
    expect(ev!.payload).toMatchObject({ to: 'scheduled', reason: 'AGENT_GONE:x1' });
  });

  it('keeps the claim when a newer session (on another replica) holds the agent, and names that replica', async () => {
    const s1 = randomUUID();
    const a = await claimedFor('x2');
    await connect('x2', 'r2', randomUUID());
    expect(await releaseUndelivered(db.sql, a, s1, 'AGENT_GONE:x2')).toEqual({ released: false, heldBy: 'r2' });
    expect(await tiState(a.tiId)).toMatchObject({ state: 'queued', try_number: 1, agent_id: 'x2' });
  });

  it('gives back once the agent is held by no session: its replica is shutting down, or it never connected', async () => {
    await connect('x3', 'r1', randomUUID());
    await connect('y3', 'r2', randomUUID());
    expect(await disconnectReplica(db.sql, 'r1')).toBe(1);
    const held = await db.sql<{ agent_id: string; connected_replica: string | null; session_id: string | null }[]>`
      select agent_id, connected_replica, session_id from agents order by agent_id`;
    expect(held.map((r) => [r.agent_id, r.connected_replica, r.session_id !== null])).toEqual([
      ['x3', null, false],
      ['y3', 'r2', true],
    ]);
    const a = await claimedFor('x3');
    expect((await releaseUndelivered(db.sql, a, randomUUID(), 'AGENT_GONE:x3')).released).toBe(true);
    const b = await claimedFor('never-connected');
    expect((await releaseUndelivered(db.sql, b, randomUUID(), 'AGENT_GONE:never-connected')).released).toBe(true);
  });

  it('a session opening at the same moment is waited for and seen: the claim is kept for it', async () => {
    const s1 = randomUUID();
    await connect('x4', 'r1', s1);
    const a = await claimedFor('x4');
    // A Hello on another replica, its write not yet committed.
    let commit!: () => void;
    const committed = new Promise<void>((r) => (commit = r));
    const opening = db.sql.begin(async (tx) => {
      await tx`update agents set connected_replica = 'r2', session_id = ${randomUUID()} where agent_id = 'x4'`;
      await committed;
    });
    await new Promise((r) => setTimeout(r, 100));
    let settled = false;
    const release = releaseUndelivered(db.sql, a, s1, 'AGENT_GONE:x4').finally(() => (settled = true));
    await new Promise((r) => setTimeout(r, 300));
    expect(settled).toBe(false); // waiting for the agent's row
    commit();
    await opening;
    expect(await release).toEqual({ released: false, heldBy: 'r2' });
    expect((await tiState(a.tiId)).state).toBe('queued');
  });
});
