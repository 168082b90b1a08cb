import { describe, expect, it } from 'vitest';
import type { ActiveRunRow } from '../../src/db/runs.js';
import type { PlannerTi } from '../../src/db/tis.js';
import { mappedMemory } from '../../src/scheduler/mapped-fast-path.js';

const run = {
  id: '1',
  spec: { tasks: [{ id: 'gen' }, { id: 'each', map: { upstream: 'gen', path: [] } }] },
} as unknown as ActiveRunRow;
const ti = (task_id: string, state: PlannerTi['state'], map_count: number | null = null): PlannerTi => ({
  id: task_id,
  run_id: '1',
  task_id,
  state,
  executor: 'subprocess',
  pending_reason: null,
  next_try_at: null,
  map_count,
});

describe('what the planner keeps of a run with mapped tasks', () => {
  it('keeps it as a read gives it: done mapped instances left out', () => {
    const tis = [ti('gen', 'success'), ti('each', 'waiting', 3), ti('each[0]', 'success'), ti('each[1]', 'queued')];
    const kept = mappedMemory(run, [...tis, ti('each[2]', 'none')]);
    expect(kept?.map((t) => t.task_id)).toEqual(['gen', 'each', 'each[1]', 'each[2]']);
  });

  it('keeps nothing once none of its mapped instances known is left to schedule: only a read says what is next', () => {
    expect(mappedMemory(run, [ti('gen', 'success'), ti('each', 'waiting', 900), ti('each[499]', 'queued')])).toBeNull();
    expect(mappedMemory(run, [ti('gen', 'success'), ti('each', 'waiting', 1), ti('each[0]', 'success')])).toBeNull();
  });

  it('keeps a run whose mapped task is not expanded yet, or is done', () => {
    expect(mappedMemory(run, [ti('gen', 'running'), ti('each', 'none')])).toHaveLength(2);
    expect(mappedMemory(run, [ti('gen', 'success'), ti('each', 'success', 2)])).toHaveLength(2);
  });
});
