import { describe, expect, it } from 'vitest';
import { Backoff } from '../../src/agent/backoff.js';

describe('Backoff (exponential, full jitter)', () => {
  it('doubles the ceiling from initialMs up to maxMs', () => {
    const b = new Backoff({ initialMs: 100, maxMs: 1000, random: () => 0.999999 });
    const delays = Array.from({ length: 7 }, () => b.next());
    expect(delays).toEqual([99, 199, 399, 799, 999, 999, 999]);
    expect(b.attempt).toBe(7);
  });

  it('draws each delay uniformly below the ceiling (full jitter)', () => {
    const draws = [0, 0.5, 0.25];
    const b = new Backoff({ initialMs: 100, maxMs: 10_000, random: () => draws.shift()! });
    expect([b.next(), b.next(), b.next()]).toEqual([0, 100, 100]);
  });

  it('starts small again after reset, and never overflows', () => {
    const b = new Backoff({ random: () => 0.5 });
    for (let i = 0; i < 2000; i++) b.next();
    expect(b.next()).toBe(5000);
    b.reset();
    expect(b.ceilingMs()).toBe(100);
    expect(b.next()).toBe(50);
  });

  it('with Math.random, stays within [0, ceiling)', () => {
    const b = new Backoff({ initialMs: 10, maxMs: 80 });
    for (let i = 0; i < 100; i++) {
      const ceiling = b.ceilingMs();
      const d = b.next();
      expect(d).toBeGreaterThanOrEqual(0);
      expect(d).toBeLessThan(ceiling);
    }
  });

  it('is bounded by the control plane (Welcome.max_reconnect_backoff), however many tries failed', () => {
    const b = new Backoff({ initialMs: 100, maxMs: 10_000, random: () => 0.999999 });
    for (let i = 0; i < 5; i++) b.next(); // the ceiling has grown to 3.2 s
    b.bound(250);
    expect(b.maxMs).toBe(250);
    const delays = Array.from({ length: 50 }, () => b.next());
    expect(Math.max(...delays)).toBe(249);
    // A bound below the first delay's ceiling lowers that too; the bound stays after a reset.
    b.bound(40);
    b.reset();
    expect([b.ceilingMs(), b.next(), b.next()]).toEqual([40, 39, 39]);
  });

  it('never raises its own maximum for a larger bound, and ignores a bound that is not a positive number', () => {
    const b = new Backoff({ initialMs: 100, maxMs: 1000, random: () => 0.999999 });
    b.bound(60_000);
    expect(b.maxMs).toBe(1000);
    for (const nonsense of [0, -5, Number.NaN, Number.POSITIVE_INFINITY, undefined]) b.bound(nonsense);
    expect(b.maxMs).toBe(1000);
    expect(Array.from({ length: 20 }, () => b.next()).every((d) => d < 1000)).toBe(true);
  });

  it('with Math.random and a bound, every delay stays below the bound', () => {
    const b = new Backoff();
    b.bound(2500); // a quarter of a 10 s heartbeat threshold
    for (let i = 0; i < 1000; i++) expect(b.next()).toBeLessThan(2500);
  });

  it('rejects nonsense options', () => {
    expect(() => new Backoff({ initialMs: 0 })).toThrow('backoff initialMs must be positive, got 0');
    expect(() => new Backoff({ initialMs: 100, maxMs: 50 })).toThrow(
      'backoff maxMs must be at least initialMs, got 50',
    );
  });
});
