import { describe, expect, it } from 'vitest';
import {
  attemptSpanId,
  attemptTraceContext,
  formatTraceparent,
  newRunTrace,
  parseTraceparent,
  parseTracestate,
} from '../../src/core/trace-context.js';

const T = '4bf92f3577b34da6a3ce929d0e0e4736';
const S = '00f067aa0ba902b7';

describe('parseTraceparent (W3C trace context, level 1)', () => {
  it('reads a version-00 header', () => {
    expect(parseTraceparent(`00-${T}-${S}-01`)).toEqual({ traceId: T, spanId: S, flags: 1 });
    expect(parseTraceparent(` 00-${T}-${S}-00 `)).toEqual({ traceId: T, spanId: S, flags: 0 });
  });
  it('ignores what the spec says to ignore', () => {
    for (const bad of [
      undefined,
      '',
      `00-${'0'.repeat(32)}-${S}-01`, // all-zero trace id
      `00-${T}-${'0'.repeat(16)}-01`, // all-zero span id
      `ff-${T}-${S}-01`, // version ff is invalid
      `00-${T}-${S}-01-extra`, // version 00 has nothing after the flags
      `00-${T.toUpperCase()}-${S}-01`, // hex is lowercase
      `00-${T.slice(1)}-${S}-01`,
      `00-${T}-${S}-1`,
      'garbage',
    ])
      expect(parseTraceparent(bad), String(bad)).toBeNull();
  });
  it('reads a later version by its first four fields', () => {
    expect(parseTraceparent(`01-${T}-${S}-01-what-comes-later`)).toEqual({ traceId: T, spanId: S, flags: 1 });
  });
  it('formats what it parses', () => {
    expect(formatTraceparent({ traceId: T, spanId: S, flags: 3 })).toBe(`00-${T}-${S}-03`);
  });
});

describe('parseTracestate', () => {
  it("keeps a printable header up to the spec's size and drops the rest", () => {
    expect(parseTracestate('congo=t61rcWkgMzE,rojo=00f067aa0ba902b7')).toBe('congo=t61rcWkgMzE,rojo=00f067aa0ba902b7');
    expect(parseTracestate('')).toBeNull();
    expect(parseTracestate('a=\u0000')).toBeNull();
    expect(parseTracestate('x'.repeat(32 * 257 + 1))).toBeNull();
  });
});

describe('run and attempt trace contexts', () => {
  it("continues a caller's trace with a span of the run's own, keeping its flags and tracestate", () => {
    const t = newRunTrace({ traceId: T, spanId: S, flags: 0 }, 'v=1');
    const p = parseTraceparent(t.traceparent)!;
    expect(p.traceId).toBe(T);
    expect(p.spanId).not.toBe(S);
    expect(p.flags).toBe(0);
    expect(t.parentSpan).toBe(S);
    expect(t.tracestate).toBe('v=1');
  });
  it('starts a sampled trace of its own without a caller', () => {
    const a = newRunTrace(null, null);
    const b = newRunTrace(null, null);
    expect(parseTraceparent(a.traceparent)!.flags).toBe(1);
    expect(a.parentSpan).toBeNull();
    expect(parseTraceparent(a.traceparent)!.traceId).not.toBe(parseTraceparent(b.traceparent)!.traceId);
  });
  it('derives one span id per attempt, the same wherever it is computed', () => {
    expect(attemptSpanId(S, '7', 1)).toBe(attemptSpanId(S, '7', 1));
    const ids = new Set([
      attemptSpanId(S, '7', 1),
      attemptSpanId(S, '7', 2),
      attemptSpanId(S, '8', 1),
      attemptSpanId('1111111111111111', '7', 1),
    ]);
    expect(ids.size).toBe(4);
    const c = attemptTraceContext({ traceparent: `00-${T}-${S}-01`, tracestate: 'v=1' }, '7', 2)!;
    expect(c).toEqual({ traceparent: `00-${T}-${attemptSpanId(S, '7', 2)}-01`, tracestate: 'v=1' });
    expect(attemptTraceContext({ traceparent: 'bad', tracestate: null }, '7', 1)).toBeNull();
  });
});
