import { describe, expect, it } from 'vitest';
import { agentHealth } from '../../src/core/agent-health.js';

const now = Date.parse('2026-11-27T10:00:00Z');
const ago = (ms: number) => new Date(now - ms);
const o = { freshMs: 15_000, thresholdMs: 90_000, now };

describe('agentHealth', () => {
  it('is healthy while its stream is open and it kept alive within the fresh bound', () => {
    expect(agentHealth({ connected: true, lastSeenAt: ago(2_000) }, o)).toBe('healthy');
  });
  it('is stale once silent past the fresh bound, or disconnected, within the heartbeat threshold', () => {
    expect(agentHealth({ connected: true, lastSeenAt: ago(20_000) }, o)).toBe('stale');
    expect(agentHealth({ connected: false, lastSeenAt: ago(2_000) }, o)).toBe('stale');
    expect(agentHealth({ connected: false, lastSeenAt: ago(89_999) }, o)).toBe('stale');
  });
  it('is dead past the heartbeat threshold, or never seen', () => {
    expect(agentHealth({ connected: false, lastSeenAt: ago(90_000) }, o)).toBe('dead');
    expect(agentHealth({ connected: true, lastSeenAt: ago(600_000) }, o)).toBe('dead');
    expect(agentHealth({ connected: false, lastSeenAt: null }, o)).toBe('dead');
  });
  it('is stopped once disconnected after saying goodbye, however long ago; a goodbye while connected again counts for nothing', () => {
    expect(agentHealth({ connected: false, lastSeenAt: ago(2_000), stoppedAt: ago(2_000) }, o)).toBe('stopped');
    expect(agentHealth({ connected: false, lastSeenAt: ago(600_000), stoppedAt: ago(600_000) }, o)).toBe('stopped');
    expect(agentHealth({ connected: true, lastSeenAt: ago(2_000), stoppedAt: ago(5_000) }, o)).toBe('healthy');
    expect(agentHealth({ connected: false, lastSeenAt: ago(2_000), stoppedAt: null }, o)).toBe('stale');
  });
});
