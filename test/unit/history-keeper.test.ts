import { afterEach, describe, expect, it, vi } from 'vitest';
import { createHistoryKeeper, type HistoryKeeper } from '../../src/scheduler/history-keeper.js';

let keeper: HistoryKeeper | null = null;
afterEach(async () => {
  await keeper?.stop();
  keeper = null;
  vi.useRealTimers();
});

describe('history keeper (the timer of the history rounds)', () => {
  it('runs rounds only while leading, the first of each leadership fresh; busy apart while more waits, idle apart when not', async () => {
    vi.useFakeTimers();
    const rounds: { at: number; fresh: boolean }[] = [];
    let leading = false;
    let more = true;
    keeper = createHistoryKeeper({
      round: async (fresh) => {
        rounds.push({ at: Date.now(), fresh });
        return { more };
      },
      leading: () => leading,
      failed: (err) => {
        throw err;
      },
      busyMs: 100,
      idleMs: 1000,
    });
    const t0 = Date.now();
    keeper.start();
    await vi.advanceTimersByTimeAsync(500);
    expect(rounds).toEqual([]);
    leading = true;
    await vi.advanceTimersByTimeAsync(250);
    expect(rounds.map((r) => [r.at - t0, r.fresh])).toEqual([
      [600, true],
      [700, false],
    ]);
    more = false;
    await vi.advanceTimersByTimeAsync(50);
    // That round said nothing more is waiting: the next comes an idle interval later.
    await vi.advanceTimersByTimeAsync(999);
    expect(rounds.map((r) => r.at - t0)).toEqual([600, 700, 800]);
    await vi.advanceTimersByTimeAsync(1);
    expect(rounds.map((r) => r.at - t0)).toEqual([600, 700, 800, 1800]);
    // Deposed, then elected again: the first round of the new leadership is fresh.
    leading = false;
    await vi.advanceTimersByTimeAsync(1000);
    leading = true;
    await vi.advanceTimersByTimeAsync(100);
    expect(rounds.at(-1)).toEqual({ at: t0 + 2900, fresh: true });
    expect(rounds).toHaveLength(5);
  });

  it('goes on after a round that throws, and stop waits for the round in flight', async () => {
    const failures: unknown[] = [];
    let calls = 0;
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    keeper = createHistoryKeeper({
      round: async () => {
        calls++;
        if (calls === 1) throw new Error('database gone');
        if (calls === 2) await held;
        return { more: true };
      },
      leading: () => true,
      failed: (err) => failures.push(err),
      busyMs: 5,
      idleMs: 5,
    });
    keeper.start();
    await vi.waitFor(() => expect(calls).toBe(2));
    expect(failures).toEqual([new Error('database gone')]);
    let stopped = false;
    const stopping = keeper.stop().then(() => (stopped = true));
    await new Promise((r) => setTimeout(r, 20));
    expect(stopped).toBe(false);
    release();
    await stopping;
    await new Promise((r) => setTimeout(r, 20));
    expect(calls).toBe(2);
  });
});
