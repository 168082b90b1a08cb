import pino from 'pino';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { createDispatchPool } from '../../src/dispatch/pool.js';

const logger = pino({ level: 'silent' });

function gate() {
  let open!: () => void;
  const p = new Promise<void>((r) => (open = r));
  return { p, open };
}

describe('dispatch pool', () => {
  // The pool has no timer of its own; the dispatches below that take time sleep on the fake clock.
  beforeEach(() => {
    vi.useFakeTimers();
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it('never blocks: refuses when full, dedupes waiting and in-flight items, and drains with N workers', async () => {
    const g = gate();
    const started: string[] = [];
    const pool = createDispatchPool<string>({
      workers: 1,
      capacity: 1,
      key: (s) => s,
      logger,
      dispatch: async (s) => {
        started.push(s);
        await g.p;
      },
    });
    expect(pool.offer('a')).toBe('accepted'); // taken by the drainer at once
    expect(pool.offer('a')).toBe('duplicate'); // in flight
    expect(pool.offer('b')).toBe('accepted'); // waits
    expect(pool.offer('b')).toBe('duplicate'); // waiting
    expect(pool.offer('c')).toBe('full');
    expect(pool.depth).toBe(1);
    expect(pool.inFlight).toBe(1);
    g.open();
    await vi.advanceTimersByTimeAsync(0); // a and b's dispatches settle (promises only)
    expect(started).toEqual(['a', 'b']);
    expect(pool.depth).toBe(0);
    expect(pool.offer('a')).toBe('accepted'); // done: may be offered again
    await pool.close();
    expect(pool.offer('z')).toBe('closed');
  });

  it('runs up to N dispatches at once and survives a dispatch that throws', async () => {
    let running = 0;
    let max = 0;
    const errors: string[] = [];
    const done: string[] = [];
    const pool = createDispatchPool<number>({
      workers: 3,
      capacity: 100,
      key: String,
      logger,
      onError: (n) => errors.push(String(n)),
      onDispatched: (n) => done.push(String(n)),
      dispatch: async (n) => {
        running++;
        max = Math.max(max, running);
        await new Promise((r) => setTimeout(r, 5)); // on the fake clock
        running--;
        if (n === 4) throw new Error('boom');
      },
    });
    for (let i = 0; i < 10; i++) expect(pool.offer(i)).toBe('accepted');
    await vi.advanceTimersByTimeAsync(100);
    expect(max).toBe(3);
    expect(errors).toEqual(['4']);
    expect(done).toHaveLength(9);
    await pool.close();
  });

  it('close() forgets waiting items and waits for in-flight ones', async () => {
    const g = gate();
    const finished: number[] = [];
    const pool = createDispatchPool<number>({
      workers: 1,
      capacity: 10,
      key: String,
      logger,
      dispatch: async (n) => {
        await g.p;
        finished.push(n);
      },
    });
    pool.offer(1);
    pool.offer(2);
    const closing = pool.close();
    g.open();
    await closing;
    expect(finished).toEqual([1]);
  });

  it('rejects bad options with exact messages', () => {
    const base = { key: String, logger, dispatch: async () => {} };
    expect(() => createDispatchPool({ ...base, workers: 0, capacity: 1 })).toThrow(
      'workers must be a positive integer',
    );
    expect(() => createDispatchPool({ ...base, workers: 1, capacity: 1.5 })).toThrow(
      'capacity must be a positive integer',
    );
  });
});
