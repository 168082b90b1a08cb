import { describe, expect, it } from 'vitest';
import { IGNORED_RETRY_HOLD_MS, WriteLimiter } from '../../src/server/auth/write-limiter.js';

describe('WriteLimiter', () => {
  it('lets a caller make perSecond writes at once, then one every 1/perSecond s, and says how long to wait', () => {
    let now = 0;
    const l = new WriteLimiter(4, () => now);
    expect([l.take('a'), l.take('a'), l.take('a'), l.take('a')]).toEqual([null, null, null, null]);
    expect(l.take('a')).toBe(250);
    now = 100;
    expect(l.take('a')).toBe(150);
    now = 250;
    expect(l.take('a')).toBeNull();
    expect(l.take('a')).toBe(250);
    // A quiet second refills the bucket, but never past perSecond.
    now = 10_000;
    expect(Array.from({ length: 5 }, () => l.take('a'))).toEqual([null, null, null, null, 250]);
  });

  it('lets a burst of `burst` by after a quiet while, then perSecond a second', () => {
    let now = 0;
    const l = new WriteLimiter(2, () => now, 20);
    expect(Array.from({ length: 21 }, () => l.take('a')).filter((w) => w === null)).toHaveLength(20);
    now = 1_000;
    expect([l.take('a'), l.take('a'), l.take('a')]).toEqual([null, null, 500]);
    // Ten quiet seconds refill it, never past the burst.
    now = 100_000;
    expect(Array.from({ length: 21 }, () => l.take('a')).filter((w) => w === null)).toHaveLength(20);
  });

  it("holds each caller to its own bucket: one's flood refuses no other", () => {
    const l = new WriteLimiter(2, () => 0);
    l.take('flood');
    l.take('flood');
    expect(l.take('flood')).toBe(500);
    expect(l.take('other')).toBeNull();
  });

  it('holds the refusals of a caller that came back before its retry-after, and only those', () => {
    let now = 0;
    const l = new WriteLimiter(2, () => now);
    l.take('a');
    l.take('a');
    expect(l.take('a')).toBe(500);
    expect(l.holdMs('a')).toBe(0); // the first refusal: answered at once
    now = 100;
    expect(l.take('a')).toBe(400);
    expect(l.holdMs('a')).toBe(IGNORED_RETRY_HOLD_MS); // 400 ms early: a closed loop's resend
    now = 500;
    expect(l.take('a')).toBeNull(); // it waited: let in, and nothing is held
    expect(l.take('a')).toBe(500);
    expect(l.holdMs('a')).toBe(0);
    expect(l.holdMs('other')).toBe(0);
  });

  it('forgets callers quiet for a second once it holds many, and keeps the ones still waiting', () => {
    let now = 0;
    const l = new WriteLimiter(1, () => now);
    expect(l.take('busy')).toBeNull();
    for (let i = 0; i < 1_100; i++) l.take(`quiet-${i}`);
    now = 999;
    // busy has not refilled: it must still be refused, though the map was swept meanwhile.
    expect(l.take('busy')).toBe(1);
    now = 2_500;
    for (let i = 0; i < 1_100; i++) l.take(`later-${i}`);
    expect(l.take('busy')).toBeNull();
  });
});
