import { create } from '@bufbuild/protobuf';
import { timestampFromMs } from '@bufbuild/protobuf/wkt';
import { describe, expect, it } from 'vitest';
import { MAP_FAILURES_LISTED, MAP_PROGRESS_EVERY_MS, MoveLines } from '../../src/cli/watch-run-lines.js';
import { TaskInstanceSchema } from '../../src/gen/leoflow/v1/types_pb.js';
import { RunEventSchema } from '../../src/gen/leoflow/v1/workflow_pb.js';

/** `run watch` without a terminal: the lines made from a run's events, a mapped task's folded. */
const T0 = Date.UTC(2026, 10, 29, 12, 0, 0);

function linesOf(own: string[], events: [number, string, Record<string, unknown>][]): string[] {
  const out: string[] = [];
  const lines = new MoveLines(
    own.map((taskId) => create(TaskInstanceSchema, { taskId, maxTries: 2 })),
    (l) => out.push(l.trimEnd()),
  );
  events.forEach(([ms, kind, payload], i) =>
    lines.add(
      create(RunEventSchema, {
        seq: String(i + 1),
        kind,
        at: timestampFromMs(T0 + ms),
        payloadJson: JSON.stringify(payload),
      }),
    ),
  );
  lines.flush();
  return out;
}

describe('run watch lines', () => {
  it("prints each task's move with its try, exit and reason, and counts the run's tasks done", () => {
    const out = linesOf(
      ['a', 'b'],
      [
        [0, 'ti.state', { task_id: 'a', to: 'running', try: 1 }],
        [10, 'ti.pending', { task_id: 'b', reason: 'UPSTREAM_RUNNING' }],
        [20, 'ti.state', { task_id: 'a', to: 'success', try: 1, exit_code: 0 }],
        [30, 'ti.pending', { task_id: 'b' }],
      ],
    );
    expect(out).toEqual([
      '  12:00:00.000  a         running         try 1/2  [0/2 done]',
      '  12:00:00.010  b         none            UPSTREAM_RUNNING  [0/2 done]',
      '  12:00:00.020  a         success         try 1/2, exit 0  [1/2 done]',
    ]);
  });

  it('folds a mapped task into progress lines, at most every interval, its last counting every item', () => {
    const events: [number, string, Record<string, unknown>][] = [
      [0, 'ti.state', { task_id: 'each', to: 'waiting' }],
      [1, 'ti.expanded', { task_id: 'each', count: 1000 }],
    ];
    // 1,000 items, each queued, running and ended over 20 s: three events an item.
    for (let i = 0; i < 1000; i++) {
      const ms = 2 + i * 20;
      events.push([ms, 'ti.pending', { task_id: `each[${i}]`, reason: 'WAITING_FOR_DISPATCH:queue 1 of 1 in use' }]);
      events.push([ms, 'ti.state', { task_id: `each[${i}]`, to: 'queued', try: 1 }]);
      events.push([ms + 5, 'ti.state', { task_id: `each[${i}]`, to: 'running', try: 1 }]);
      events.push([ms + 10, 'ti.state', { task_id: `each[${i}]`, to: 'success', try: 1, exit_code: 0 }]);
    }
    events.push([20_100, 'ti.state', { task_id: 'each', to: 'success' }]);
    const out = linesOf(['each'], events);
    expect(out[0]).toContain('each      waiting');
    expect(out[1]).toBe('  12:00:00.001  each      expanded        1000 mapped instances, each[0..999]  [0/1 done]');
    const progress = out.filter((l) => /\]  mapped /.test(l));
    // A line each MAP_PROGRESS_EVERY_MS of the events' clock (20 s of moves: 3), and the last before its end.
    expect(MAP_PROGRESS_EVERY_MS).toBe(5_000);
    expect(progress.length).toBe(4);
    expect(progress[0]).toBe(
      '  12:00:05.002  each[0..999]  mapped          750 none, 250 success; WAITING_FOR_DISPATCH:queue 1 of 1 in use' +
        '  [0/1 done]',
    );
    expect(progress.at(-1)).toContain('mapped          1000 success  [0/1 done]');
    expect(out.at(-1)).toContain('each      success');
    expect(out.at(-1)).toContain('[1/1 done]');
    expect(out.filter((l) => /each\[\d+\] /.test(l))).toEqual([]);
  });

  it("lists a mapped task's first failed tries one by one, then only counts them", () => {
    const events: [number, string, Record<string, unknown>][] = [[0, 'ti.expanded', { task_id: 'each', count: 50 }]];
    for (let i = 0; i < 50; i++) {
      events.push([1 + i, 'ti.state', { task_id: `each[${i}]`, to: 'failed', try: 2, exit_code: 3, error: 'boom' }]);
    }
    const out = linesOf(['each'], events);
    const listed = out.filter((l) => /each\[\d+\] /.test(l));
    expect(listed.length).toBe(MAP_FAILURES_LISTED);
    expect(listed[0]).toBe('  12:00:00.001  each[0]   failed          try 2/2, exit 3, boom  [0/1 done]');
    expect(listed.at(-1)).toContain('(further failed tries are counted, not listed)');
    expect(out.at(-1)).toContain('mapped          50 failed');
  });
});
