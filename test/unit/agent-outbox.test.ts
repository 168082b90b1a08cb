import { describe, expect, it } from 'vitest';
import { Outbox, type OutboxKind } from '../../src/agent/outbox.js';

function entry(key: string, kind: OutboxKind, message: string, lines = 0, lastSeq?: number) {
  return { key, kind, message, lines, lastSeq };
}

function drain(o: Outbox<string>, confirmedBy: number): string[] {
  const out: string[] = [];
  for (let e = o.shift(confirmedBy); e; e = o.shift(confirmedBy)) out.push(e.message);
  return out;
}

describe('Outbox', () => {
  it('writes in order; a KeepaliveAck confirms Started written before that Keepalive, a LogAck the Log lines it covers, Finished waits for FinishedAck', () => {
    const o = new Outbox<string>();
    o.push(entry('a', 'started', 'S'));
    o.push(entry('a', 'log', 'L1', 2, 2));
    expect(drain(o, 1)).toEqual(['S', 'L1']);
    o.push(entry('a', 'log', 'L2', 3, 5));
    o.push(entry('b', 'log', 'Lb', 1, 1));
    o.push(entry('a', 'finished', 'F'));
    expect(drain(o, 2)).toEqual(['L2', 'Lb', 'F']);
    o.confirm(2); // S; the Log entries wait for their LogAck
    expect(o.size).toBe(4);
    expect(o.confirmLog('a', 4)).toBe(2); // L1 only: L2 ends at seq 5
    expect(o.confirmLog('a', 5)).toBe(3); // L2; b's line is not a's
    expect(o.size).toBe(2);
    expect(o.hasFinished('a')).toBe(true);
    expect(o.remove('a')).toBe(0);
    expect(o.size).toBe(1);
  });

  it('rewinds what a lost stream did not confirm, ahead of what was never written', () => {
    const o = new Outbox<string>();
    o.push(entry('a', 'started', 'S'));
    o.push(entry('a', 'log', 'L1', 1, 1));
    drain(o, 1);
    o.confirm(1);
    o.confirmLog('a', 1);
    o.push(entry('a', 'log', 'L2', 1));
    o.push(entry('b', 'started', 'Sb'));
    expect(o.shift(2)!.message).toBe('L2');
    o.push(entry('a', 'finished', 'F'));
    o.rewind();
    expect(o.unsentCount).toBe(3);
    expect(drain(o, 1)).toEqual(['L2', 'Sb', 'F']);
  });

  it('remove forgets one attempt everywhere and releases its lines', () => {
    const o = new Outbox<string>();
    o.push(entry('a', 'log', 'La', 5));
    o.push(entry('b', 'log', 'Lb', 7));
    o.shift(1);
    o.push(entry('a', 'log', 'La2', 2));
    expect(o.remove('a')).toBe(7);
    expect(drain(o, 1)).toEqual(['Lb']);
  });
});
