import { describe, expect, it } from 'vitest';
import { attemptSpanId } from '../../src/core/trace-context.js';
import type { StateEvent, TracedRun } from '../../src/db/trace/trace-sources.js';
import { endsIn, spansOfEvents } from '../../src/tracing/spans-of-events.js';

const T = '4bf92f3577b34da6a3ce929d0e0e4736';
const RUN_SPAN = '1111111111111111';
const at = (s: number) => new Date(Date.UTC(2026, 10, 27, 10, 0, s));
const run: TracedRun = {
  id: '5',
  dag_id: 'd',
  run_key: 'k',
  run_type: 'manual',
  created_at: at(0),
  traceparent: `00-${T}-${RUN_SPAN}-01`,
  trace_parent_span: null,
  tracestate: null,
};

let seq = 0;
const ti = (tiId: string, to: string, s: number, extra: Record<string, unknown> = {}): StateEvent => ({
  seq: String(++seq),
  run_id: '5',
  ti_id: tiId,
  kind: 'ti.state',
  payload: { task_id: `t${tiId}`, to, try: 1, ...extra },
  at: at(s),
});
const runEv = (to: string, s: number): StateEvent => ({
  seq: String(++seq),
  run_id: '5',
  ti_id: null,
  kind: 'run.state',
  payload: { to },
  at: at(s),
});

describe('spansOfEvents', () => {
  it('makes an attempt span from claim to end, with its start as an event, only for ends after the place given', () => {
    seq = 0;
    const events = [
      ti('1', 'scheduled', 1),
      ti('1', 'queued', 2, { agent_id: 'a1' }),
      ti('1', 'running', 3),
      ti('1', 'success', 4, { exit_code: 0 }),
    ];
    const [span, ...rest] = spansOfEvents(3n, [run], events);
    expect(rest).toEqual([]);
    expect(span).toMatchObject({
      name: 'attempt t1',
      spanId: attemptSpanId(RUN_SPAN, '1', 1),
      start: at(2),
      end: at(4),
      error: null,
    });
    expect(span!.parent!.traceparent).toBe(run.traceparent);
    expect(span!.events).toEqual([{ name: 'started', at: at(3) }]);
    expect(span!.attributes).toMatchObject({
      'leoflow.agent_id': 'a1',
      'leoflow.exit_code': 0,
      'leoflow.try_number': 1,
    });
    // Already exported: its end is at or before the place.
    expect(spansOfEvents(4n, [run], events)).toEqual([]);
  });

  it('takes a claim given back and made again as one attempt, from its first claim', () => {
    seq = 0;
    const events = [
      ti('1', 'queued', 1),
      ti('1', 'scheduled', 2, { reason: 'DISPATCH_REFUSED' }),
      ti('1', 'queued', 3, { agent_id: 'a2' }),
      ti('1', 'running', 4),
      ti('1', 'failed', 5, { error: 'exit code 3', exit_code: 3 }),
    ];
    const spans = spansOfEvents(0n, [run], events);
    expect(spans).toHaveLength(1);
    expect(spans[0]).toMatchObject({ start: at(1), end: at(5), error: 'exit code 3' });
    expect(spans[0]!.attributes['leoflow.agent_id']).toBe('a2');
  });

  it('makes no span for an end whose claim it never saw, nor for a run made before tracing', () => {
    seq = 0;
    expect(spansOfEvents(0n, [run], [ti('1', 'running', 1), ti('1', 'success', 2)])).toEqual([]);
    expect(
      spansOfEvents(
        0n,
        [{ ...run, traceparent: null }],
        [ti('1', 'queued', 1), ti('1', 'success', 2), runEv('success', 3)],
      ),
    ).toEqual([]);
  });

  it("makes the run span at its first end (root, or the caller's child) and a child for a stretch after a clear", () => {
    seq = 0;
    const caller = { ...run, trace_parent_span: '2222222222222222', tracestate: 'v=1' };
    const events = [runEv('running', 1), runEv('failed', 2), runEv('running', 5), runEv('success', 7)];
    const [first, again] = spansOfEvents(0n, [caller], events);
    expect(first).toMatchObject({
      name: 'run d',
      traceId: T,
      spanId: RUN_SPAN,
      start: at(0),
      end: at(2),
      error: 'run failed',
    });
    expect(first!.parent).toEqual({ traceparent: `00-${T}-2222222222222222-01`, tracestate: 'v=1' });
    expect(again).toMatchObject({ name: 'run d (cleared)', start: at(5), end: at(7), error: null });
    expect(again!.spanId).toBeUndefined();
    expect(again!.parent!.traceparent).toBe(caller.traceparent);
    expect(spansOfEvents(0n, [run], [runEv('success', 3)])[0]!.parent).toBeNull();
  });

  it('finds the ends a batch holds', () => {
    seq = 0;
    const batch = [
      ti('1', 'queued', 1),
      ti('2', 'success', 2),
      ti('3', 'scheduled', 2),
      runEv('running', 3),
      runEv('cancelled', 4),
    ];
    expect(endsIn(batch)).toEqual({ runIds: ['5'], tiIds: ['2'], endedRunIds: ['5'] });
  });
});
