import { describe, expect, it } from 'vitest';
import { LineSplitter } from '../../src/executors/process/line-splitter.js';

describe('LineSplitter', () => {
  it('splits on newlines across chunks and keeps a trailing partial line for end()', () => {
    const s = new LineSplitter();
    expect(s.push(Buffer.from('a\nb'))).toEqual(['a']);
    expect(s.push(Buffer.from('c\r\n\nd'))).toEqual(['bc', '']);
    expect(s.end()).toEqual(['d']);
    expect(s.end()).toEqual([]);
  });

  it('reassembles a multi-byte character split across chunks', () => {
    const bytes = Buffer.from('€x\n'); // € is three bytes
    const s = new LineSplitter();
    expect(s.push(bytes.subarray(0, 1))).toEqual([]);
    expect(s.push(bytes.subarray(1, 2))).toEqual([]);
    expect(s.push(bytes.subarray(2))).toEqual(['€x']);
  });

  it('caps a line, without cutting a character, and counts what it dropped', () => {
    const s = new LineSplitter(8);
    // "abcdef€" is 9 bytes: the cap falls inside "€", which is dropped whole.
    expect(s.push(Buffer.from('abcdef€'))).toEqual([]);
    expect(s.push(Buffer.from('ghi\nok\n'))).toEqual(['abcdef… [line truncated: 6 more bytes]', 'ok']);
  });
});
