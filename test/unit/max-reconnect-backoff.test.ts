import { describe, expect, it } from 'vitest';
import { maxReconnectBackoffMs } from '../../src/server/agents/fleet.js';

describe('the reconnect bound Welcome gives agents', () => {
  it('is a quarter of the heartbeat threshold, capped at 10 s, and never zero', () => {
    expect(maxReconnectBackoffMs(1000)).toBe(250);
    expect(maxReconnectBackoffMs(8000)).toBe(2000);
    expect(maxReconnectBackoffMs(30_000)).toBe(7500);
    expect(maxReconnectBackoffMs(90_000)).toBe(10_000); // the default threshold: well below it
    expect(maxReconnectBackoffMs(2)).toBe(1);
  });
});
