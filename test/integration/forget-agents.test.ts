import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { connectAgent, listAgents } from '../../src/db/agents.js';
import { forgetAgent } from '../../src/db/forget-agent.js';
import { FORGET_AGENTS_PER_ROUND } from '../../src/scheduler/history-round.js';
import { pastRun } from '../helpers/history-fixtures.js';
import { quietHistoryRound } from '../helpers/quiet-history-round.js';
import { databaseForFile } from '../helpers/test-database.js';

const DAY_MS = 86_400_000;
/** Connected: a stream kept alive within this (three keepalive intervals). */
const LIVE_MS = 15_000;

const db = databaseForFile();

/** An agent's row as its stream left it: `connected` holds a session of replica r1. */
async function agent(
  id: string,
  o: { seenMsAgo: number | null; connected?: boolean; draining?: boolean },
): Promise<void> {
  await db.sql`
    insert into agents (agent_id, labels, slots, draining, connected_replica, session_id, last_seen_at, connected_at)
    values (${id}, '{"zone": "a"}', 2, ${o.draining ?? false}, ${o.connected ? 'r1' : null}, ${o.connected ? randomUUID() : null},
            ${o.seenMsAgo === null ? null : new Date(Date.now() - o.seenMsAgo)}, now())`;
}

/** A run whose one task instance, in `state`, names agent `agentId`. */
let runSeq = 0;
async function attemptOn(agentId: string, state: 'running' | 'success' | 'queued'): Promise<number> {
  const id = ++runSeq;
  await pastRun(db.sql, {
    id,
    dagId: 'forget',
    state: state === 'success' ? 'success' : 'running',
    createdAt: new Date(),
    endedAt: new Date(),
    tiIds: [id * 10],
    lines: 0,
  });
  await db.sql`update task_instances set state = ${state}, agent_id = ${agentId} where id = ${id * 10}`;
  return id * 10;
}

function keeper(agentRetentionMs: number, forgotten: number[], errors: unknown[]) {
  return quietHistoryRound({
    sql: db.sql,
    retentionMs: null,
    agentRetentionMs,
    agentLiveMs: LIVE_MS,
    counters: { agentsForgotten: (n) => forgotten.push(n), error: (err) => errors.push(err) },
  });
}

const known = async () => (await listAgents(db.sql)).map((a) => a.agent_id).sort();
const clear = async () => {
  await db.sql`delete from agents`;
  await db.sql`delete from dag_runs`;
};

describe('the leader forgets agents gone longer than the agent retention', () => {
  it('forgets one gone longer, keeps one gone less, a connected one and one an attempt still names', async () => {
    await clear();
    await agent('gone-8d', { seenMsAgo: 8 * DAY_MS, draining: true });
    await agent('never-seen', { seenMsAgo: null });
    await agent('gone-6d', { seenMsAgo: 6 * DAY_MS });
    await agent('connected', { seenMsAgo: 2_000, connected: true });
    // A session a replica that died left set: its stream has been silent for days, it holds nothing.
    await agent('dead-replica', { seenMsAgo: 8 * DAY_MS, connected: true });
    await agent('holds-running', { seenMsAgo: 8 * DAY_MS });
    await agent('holds-queued', { seenMsAgo: 8 * DAY_MS });
    // An attempt that ended keeps its agent's name in history; it holds nothing.
    await agent('ran-before', { seenMsAgo: 8 * DAY_MS });
    const running = await attemptOn('holds-running', 'running');
    await attemptOn('holds-queued', 'queued');
    await attemptOn('ran-before', 'success');

    const forgotten: number[] = [];
    const errors: unknown[] = [];
    const round = keeper(7 * DAY_MS, forgotten, errors);
    const r = await round(true);
    expect(errors).toEqual([]);
    expect(r.agentsForgotten).toBe(4);
    expect(forgotten).toEqual([4]);
    expect(await known()).toEqual(['connected', 'gone-6d', 'holds-queued', 'holds-running']);

    // The attempt ends: the next round forgets its agent.
    await db.sql`update task_instances set state = 'failed' where id = ${running}`;
    expect((await round(false)).agentsForgotten).toBe(1);
    expect(await known()).toEqual(['connected', 'gone-6d', 'holds-queued']);
    expect(errors).toEqual([]);
  });

  it('keeps a connected agent however short the retention, and forgets a disconnected one seen as long ago', async () => {
    await clear();
    await agent('connected', { seenMsAgo: 8_000, connected: true });
    await agent('disconnected', { seenMsAgo: 8_000 });
    const errors: unknown[] = [];
    const r = await keeper(1_000, [], errors)(true);
    expect(errors).toEqual([]);
    expect(r.agentsForgotten).toBe(1);
    expect(await known()).toEqual(['connected']);
  });

  it('forgets a bounded batch per round and says more is waiting', async () => {
    await clear();
    const n = FORGET_AGENTS_PER_ROUND + 20;
    await db.sql`
      insert into agents (agent_id, last_seen_at)
      select 'bulk-' || g, now() - interval '10 days' - g * interval '1 second' from generate_series(1, ${n}) g`;
    const forgotten: number[] = [];
    const errors: unknown[] = [];
    const round = keeper(7 * DAY_MS, forgotten, errors);
    const first = await round(true);
    expect(first.agentsForgotten).toBe(FORGET_AGENTS_PER_ROUND);
    expect(first.more).toBe(true);
    // The longest gone go first.
    expect(await known()).not.toContain(`bulk-${n}`);
    const second = await round(false);
    expect(second.agentsForgotten).toBe(20);
    expect(forgotten).toEqual([FORGET_AGENTS_PER_ROUND, 20]);
    expect(await known()).toEqual([]);
    expect(errors).toEqual([]);
  });

  it('forgets nothing with the agent retention off', async () => {
    await clear();
    await agent('gone-1000d', { seenMsAgo: 1000 * DAY_MS });
    const round = quietHistoryRound({ sql: db.sql, retentionMs: null, agentRetentionMs: null, agentLiveMs: LIVE_MS });
    expect((await round(true)).agentsForgotten).toBe(0);
    expect(await known()).toEqual(['gone-1000d']);
  });
});

describe('forgetting one agent by hand', () => {
  it('says why an agent cannot go (unknown, connected, attempts), forgets one that can, and its id connects again as new', async () => {
    await clear();
    expect(await forgetAgent(db.sql, 'nobody', LIVE_MS)).toEqual({ outcome: 'unknown' });

    await agent('busy', { seenMsAgo: 1_000, connected: true });
    const refused = await forgetAgent(db.sql, 'busy', LIVE_MS);
    expect(refused).toMatchObject({ outcome: 'connected', replica: 'r1' });

    await agent('holder', { seenMsAgo: 60_000 });
    for (let i = 0; i < 4; i++) await attemptOn('holder', i === 0 ? 'queued' : 'running');
    const holds = await forgetAgent(db.sql, 'holder', LIVE_MS);
    expect(holds.outcome).toBe('holds');
    if (holds.outcome !== 'holds') return;
    expect(holds.attempts).toBe(4);
    expect(holds.first).toHaveLength(3);
    expect(holds.first[0]).toEqual({ runId: expect.stringMatching(/^\d+$/), taskId: 't0', state: 'queued' });

    // Just gone (seconds ago): by hand, no retention applies.
    await agent('drained', { seenMsAgo: 20_000, draining: true });
    const done = await forgetAgent(db.sql, 'drained', LIVE_MS);
    expect(done.outcome).toBe('forgotten');
    expect(await known()).toEqual(['busy', 'holder']);

    // The same id says Hello again: a new agent, not drained.
    const back = await connectAgent(db.sql, {
      agentId: 'drained',
      labels: { zone: 'b' },
      capabilities: [],
      slots: 1,
      replicaId: 'r1',
      sessionId: randomUUID(),
      protocolVersion: 2,
      incarnationId: randomUUID(),
      liveMs: LIVE_MS,
    });
    expect(back).toEqual({ draining: false });
    const row = (await listAgents(db.sql)).find((a) => a.agent_id === 'drained');
    expect(row).toMatchObject({ labels: { zone: 'b' }, draining: false, slots: 1 });
  });
});
