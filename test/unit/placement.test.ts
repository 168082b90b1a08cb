import { describe, expect, it } from 'vitest';
import { AGENT_FEATURES, needsSecretEnv } from '../../src/core/agent-features.js';
import { placeAttempt, type AgentView } from '../../src/core/placement.js';
import { placement } from '../helpers/spec-builders.js';

const agent = (agentId: string, o: Partial<AgentView> = {}): AgentView => ({
  agentId,
  labels: {},
  capabilities: [],
  slots: 2,
  running: 0,
  runningThisTask: 0,
  ...o,
});
const pool = placement({ labels: { pool: 'a' } });

describe('placeAttempt and the secret-env feature', () => {
  it('gives a task with secret variables only to an agent announcing leoflow.secret-env, and says why it waits otherwise', () => {
    const old = agent('old', { labels: { pool: 'a' }, slots: 8 });
    const capable = agent('new', { labels: { pool: 'a' }, capabilities: [AGENT_FEATURES.secretEnv] });
    expect(placeAttempt(pool, [old, capable], { secretEnv: true })).toEqual({ kind: 'placed', agentId: 'new' });
    expect(placeAttempt(pool, [old], { secretEnv: true })).toEqual({
      kind: 'waiting',
      reason: 'NO_AGENT_WITH_SECRET_ENV:leoflow.secret-env',
    });
    // Labels first: no agent of the pool at all is said as before.
    expect(placeAttempt(pool, [agent('x')], { secretEnv: true })).toEqual({
      kind: 'waiting',
      reason: 'NO_AGENT_WITH_LABELS:pool=a',
    });
    // Without secrets, the old agent (more free slots) is fine.
    expect(placeAttempt(pool, [old, capable])).toEqual({ kind: 'placed', agentId: 'old' });
    expect(
      placeAttempt(
        null,
        [agent('o', { running: 2 }), agent('n', { capabilities: [AGENT_FEATURES.secretEnv], running: 2 })],
        { secretEnv: true },
      ),
    ).toEqual({ kind: 'waiting', reason: 'AGENT_SLOTS_FULL' });
  });

  it('needs the feature only for a task with at least one secret variable', () => {
    expect(needsSecretEnv({})).toBe(false);
    expect(needsSecretEnv({ secretEnv: {} })).toBe(false);
    expect(needsSecretEnv({ secretEnv: { T: { env: 'X' } } as never })).toBe(true);
  });
});

describe('placeAttempt and draining agents', () => {
  const gpu = placement({ labels: { gpu: 'nvidia' } });

  it('says AGENT_DRAINING, with how many matching agents drain, when only draining agents match', () => {
    const draining = [
      agent('g1', { labels: { gpu: 'nvidia' } }),
      agent('g2', { labels: { gpu: 'nvidia' } }),
      agent('cpu'),
    ];
    expect(placeAttempt(gpu, [agent('cpu2')], {}, draining)).toEqual({
      kind: 'waiting',
      reason: 'AGENT_DRAINING:2 agents with gpu=nvidia',
    });
    expect(placeAttempt(gpu, [], {}, draining.slice(1))).toEqual({
      kind: 'waiting',
      reason: 'AGENT_DRAINING:1 agent with gpu=nvidia',
    });
    expect(placeAttempt(null, [], {}, draining)).toEqual({ kind: 'waiting', reason: 'AGENT_DRAINING:3 agents' });
    // No matching agent at all, draining or not: as before.
    expect(placeAttempt(gpu, [agent('cpu2')], {}, [agent('cpu')])).toEqual({
      kind: 'waiting',
      reason: 'NO_AGENT_WITH_LABELS:gpu=nvidia',
    });
    // A draining agent never takes work, and a matching agent that takes work is chosen over it.
    expect(placeAttempt(gpu, [agent('g3', { labels: { gpu: 'nvidia' } })], {}, draining)).toEqual({
      kind: 'placed',
      agentId: 'g3',
    });
  });
});
