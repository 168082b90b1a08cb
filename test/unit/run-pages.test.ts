import { create } from '@bufbuild/protobuf';
import { describe, expect, it } from 'vitest';
import { taskStateName } from '../../src/cli/format.js';
import { countByState } from '../../src/cli/run-pages.js';
import { drawRun } from '../../src/cli/watch-run-live.js';
import { RunSchema, TaskInstanceSchema, TaskState } from '../../src/gen/leoflow/v1/types_pb.js';

/** GetRun's first page of a run whose task `each` maps 100,000 items: three of them on the page. */
function firstPage(counted = true) {
  const ti = (taskId: string, state: TaskState, more = {}) => create(TaskInstanceSchema, { taskId, state, ...more });
  return [
    ti('gen', TaskState.SUCCESS),
    ti(
      'each',
      TaskState.WAITING,
      counted ? { mapCount: 100_000, mapStateCounts: { success: 60_000, running: 40_000 } } : {},
    ),
    ti('collect', TaskState.NONE),
    ...[0, 1, 2].map((i) => ti(`each[${i}]`, TaskState.SUCCESS)),
  ];
}

describe('a run read up to its own task instances', () => {
  it('counts a map by its own instance, not by the instances on the page', () => {
    expect(Object.fromEntries(countByState(firstPage(), (t) => taskStateName(t.state)))).toEqual({
      success: 60_001,
      waiting: 1,
      running: 40_000,
      none: 1,
    });
    // From a server that does not count them: the instances read.
    expect(Object.fromEntries(countByState(firstPage(false), (t) => taskStateName(t.state)))).toEqual({
      success: 4,
      waiting: 1,
      none: 1,
    });
  });

  it("`run watch`'s live view shows the map as one row, with every item counted", () => {
    const view = drawRun(create(RunSchema, { runId: '1', dagId: 'd' }), firstPage(), 100);
    expect(view).toContain('60001/100003 tasks ended');
    expect(view).toMatch(/each\[0\.\.99999\]\s+60000 success, 40000 running/);
    expect(view).not.toContain('each[1]');
  });
});
