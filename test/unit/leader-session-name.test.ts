import { describe, expect, it } from 'vitest';
import { leaderSessionName, parseLeaderSessionName } from '../../src/db/leader.js';
import { MAX_REPLICA_ID } from '../../src/server/config/config.js';

describe("the leader's lock session name", () => {
  it('names the replica alone until it has stepped', () => {
    expect(leaderSessionName('a-1', null)).toBe('leoflow:a-1');
    expect(parseLeaderSessionName('leoflow:a-1')).toEqual({ replicaId: 'a-1', report: null });
  });

  it('carries the last full step and its lateness, read back as they were said', () => {
    const at = Date.parse('2026-11-27T04:00:00.123Z');
    const name = leaderSessionName('replica.one_2', { lastFullStepAt: at, lateMs: 1234 });
    expect(parseLeaderSessionName(name)).toEqual({
      replicaId: 'replica.one_2',
      report: { lastFullStepAt: new Date(at), lateMs: 1234 },
    });
  });

  it("fits Postgres's 63 bytes with the longest replica id, far in the future and very late", () => {
    const name = leaderSessionName('x'.repeat(MAX_REPLICA_ID), {
      lastFullStepAt: Date.parse('2199-01-01T00:00:00Z'),
      lateMs: 10 * 86_400_000,
    });
    expect(Buffer.byteLength(name)).toBeLessThanOrEqual(63);
    // Lateness past what the name holds (about 16 h) is said as that much.
    expect(parseLeaderSessionName(name)!.report!.lateMs).toBe(36 ** 5 - 1);
  });

  it('is not ours without the prefix', () => {
    expect(parseLeaderSessionName('psql')).toBeNull();
  });
});
