import { describe, expect, it } from 'vitest';

import { formatDuration, parseDuration } from '../../src/core/duration.js';

const EXPECTED = 'expected a duration like "30s", "5m" or "1h30m"';

describe('parseDuration', () => {
  it.each([
    ['500ms', 500],
    ['10s', 10_000],
    ['5m', 300_000],
    ['1h', 3_600_000],
    ['1h30m', 5_400_000],
    ['2d', 172_800_000],
    ['1d2h3m4s5ms', 93_784_005],
    ['0s', 0],
    ['90s', 90_000],
    ['30', 30_000],
    ['0', 0],
  ])('reads %j as %d ms', (input, ms) => {
    expect(parseDuration(input)).toBe(ms);
  });

  it('reads a plain non-negative integer as seconds', () => {
    expect(parseDuration(30)).toBe(30_000);
    expect(parseDuration(0)).toBe(0);
  });

  it.each([
    ['5 minutes', `${EXPECTED}, got "5 minutes"`],
    ['', `${EXPECTED}, got ""`],
    ['1.5s', `${EXPECTED}, got "1.5s"`],
    ['-5s', `${EXPECTED}, got "-5s"`],
    ['1h 30m', `${EXPECTED}, got "1h 30m"`],
    [' 10s', `${EXPECTED}, got " 10s"`],
    ['10S', `${EXPECTED}, got "10S"`],
    ['5x', `${EXPECTED}, got "5x"`],
    ['h', `${EXPECTED}, got "h"`],
  ])('rejects the string %j', (input, message) => {
    expect(() => parseDuration(input)).toThrow(new Error(message));
  });

  it('rejects units out of order or repeated, and says so', () => {
    const order = '(units go from largest to smallest, each at most once: d, h, m, s, ms)';
    expect(() => parseDuration('30m1h')).toThrow(new Error(`${EXPECTED}, got "30m1h" ${order}`));
    expect(() => parseDuration('1s1s')).toThrow(new Error(`${EXPECTED}, got "1s1s" ${order}`));
    expect(() => parseDuration('5ms1s')).toThrow(new Error(`${EXPECTED}, got "5ms1s" ${order}`));
  });

  it('rejects negative, fractional and non-finite numbers', () => {
    const hint = '(a plain number is a whole, non-negative number of seconds)';
    expect(() => parseDuration(-1)).toThrow(new Error(`${EXPECTED}, got -1 ${hint}`));
    expect(() => parseDuration(1.5)).toThrow(new Error(`${EXPECTED}, got 1.5 ${hint}`));
    expect(() => parseDuration(Number.POSITIVE_INFINITY)).toThrow(new Error(`${EXPECTED}, got Infinity ${hint}`));
    expect(() => parseDuration(Number.NaN)).toThrow(new Error(`${EXPECTED}, got NaN ${hint}`));
  });

  it('names the type of other values', () => {
    expect(() => parseDuration(null)).toThrow(new Error(`${EXPECTED}, got null`));
    expect(() => parseDuration(true)).toThrow(new Error(`${EXPECTED}, got true`));
    expect(() => parseDuration(undefined)).toThrow(new Error(`${EXPECTED}, got undefined`));
    expect(() => parseDuration(['1s'])).toThrow(new Error(`${EXPECTED}, got a list`));
    expect(() => parseDuration({ s: 1 })).toThrow(new Error(`${EXPECTED}, got a mapping`));
  });

  it('rejects durations beyond the safe integer range', () => {
    expect(() => parseDuration('99999999999999d')).toThrow(new Error('duration "99999999999999d" is too large'));
    expect(() => parseDuration(Number.MAX_SAFE_INTEGER)).toThrow(
      new Error(`duration ${Number.MAX_SAFE_INTEGER} is too large`),
    );
  });

  it('truncates a long input in the message', () => {
    const long = 'x'.repeat(500);
    expect(() => parseDuration(long)).toThrow(new Error(`${EXPECTED}, got "${'x'.repeat(60)}…"`));
  });
});

describe('formatDuration', () => {
  it.each([
    [0, '0s'],
    [500, '500ms'],
    [1_500, '1s500ms'],
    [5_400_000, '1h30m'],
    [172_800_000, '2d'],
    [93_784_005, '1d2h3m4s5ms'],
  ])('formats %d ms as %j and parses back', (ms, text) => {
    expect(formatDuration(ms)).toBe(text);
    expect(parseDuration(text)).toBe(ms);
  });

  it('rejects values that are not whole non-negative milliseconds', () => {
    expect(() => formatDuration(-1)).toThrow(new Error('expected a non-negative whole number of milliseconds, got -1'));
    expect(() => formatDuration(0.5)).toThrow(
      new Error('expected a non-negative whole number of milliseconds, got 0.5'),
    );
  });
});
