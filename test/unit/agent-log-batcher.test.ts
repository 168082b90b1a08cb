import { describe, expect, it } from 'vitest';
import { LogBatcher } from '../../src/agent/log-batcher.js';

const seqs = (b: { entries: { seq: number }[] }[]) => b.flatMap((x) => x.entries.map((e) => e.seq));

describe('LogBatcher', () => {
  it('numbers lines per attempt from 1 with no gaps, and holds them until the attempt is open', () => {
    const b = new LogBatcher();
    b.push('a', 'system', 'started');
    b.push('b', 'stdout', 'b1');
    b.push('a', 'stdout', 'a1');
    expect(b.take()).toEqual([]); // neither open: Started not queued yet
    expect(b.hasPending()).toBe(false);
    b.open('a');
    expect(b.hasPending()).toBe(true);
    expect(b.take()).toEqual([
      {
        key: 'a',
        entries: [
          { seq: 1, stream: 'system', line: 'started' },
          { seq: 2, stream: 'stdout', line: 'a1' },
        ],
      },
    ]);
    b.push('a', 'stderr', 'a2');
    b.open('b');
    expect(b.take()).toEqual([
      { key: 'a', entries: [{ seq: 3, stream: 'stderr', line: 'a2' }] },
      { key: 'b', entries: [{ seq: 1, stream: 'stdout', line: 'b1' }] },
    ]);
    expect(b.take()).toEqual([]);
  });

  it('splits batches by line count and by bytes', () => {
    const b = new LogBatcher({ maxBatchLines: 3, maxBatchBytes: 10 });
    b.open('a');
    for (const line of ['1', '2', '3', '4', 'xxxxxxxx', 'yyyyyyyy', 'a-very-long-line-over-the-limit'])
      b.push('a', 'stdout', line);
    const batches = b.takeKey('a');
    expect(batches.map((x) => x.entries.map((e) => e.line))).toEqual([
      ['1', '2', '3'],
      ['4', 'xxxxxxxx'],
      ['yyyyyyyy'],
      ['a-very-long-line-over-the-limit'],
    ]);
    expect(seqs(batches)).toEqual([1, 2, 3, 4, 5, 6, 7]);
  });

  it('bounds what it keeps: drops past the budget and reports the loss in one line taking the next seq', () => {
    const b = new LogBatcher({ maxPendingLines: 3 });
    b.open('a');
    for (let i = 1; i <= 6; i++) b.push('a', 'stdout', `l${i}`);
    expect(b.outstanding).toBe(3);
    const first = b.take();
    expect(first[0]!.entries.map((e) => e.line)).toEqual(['l1', 'l2', 'l3']);
    expect(b.take()).toEqual([]); // no room for the marker while all 3 are unconfirmed
    b.release(3); // the control plane confirmed them
    b.push('a', 'stdout', 'l7');
    const next = b.take()[0]!.entries;
    expect(next).toEqual([
      {
        seq: 4,
        stream: 'system',
        line: '3 output lines dropped: more than 3 lines were waiting for the control plane',
      },
      { seq: 5, stream: 'stdout', line: 'l7' },
    ]);
  });

  it('writes the loss marker at the end even over budget', () => {
    const b = new LogBatcher({ maxPendingLines: 1 });
    b.open('a');
    b.push('a', 'stdout', 'kept');
    b.push('a', 'stdout', 'lost');
    expect(seqs(b.takeKey('a', true))).toEqual([1, 2]);
  });

  it('forget releases the buffered lines of an attempt', () => {
    const b = new LogBatcher();
    b.push('a', 'stdout', 'x');
    b.push('a', 'stdout', 'y');
    b.push('b', 'stdout', 'z');
    expect(b.outstanding).toBe(3);
    b.forget('a');
    expect(b.outstanding).toBe(1);
    b.open('a');
    b.push('a', 'stdout', 'new attempt object, new numbering');
    expect(seqs(b.take())).toEqual([1]);
  });
});
