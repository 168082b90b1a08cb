import { describe, expect, it } from 'vitest';
import type { ClaimCandidate } from '../../src/dispatch/claims-ahead.js';
import type { ActiveRunRow } from '../../src/db/runs.js';
import type { PlannerTi } from '../../src/db/tis.js';
import { claimWithTheMove } from '../../src/scheduler/claim-with-the-move.js';
import type { SchedulerContext } from '../../src/scheduler/context.js';
import type { DecidedRun } from '../../src/scheduler/decide-run.js';

describe('claiming with the move', () => {
  it('offers a mapped instance to be claimed with its move, as its task (it was never found by its id)', () => {
    const each = { id: 'each', map: { upstream: 'gen', path: [] } };
    const run = { id: '1', dag_paused: false, spec: { tasks: [{ id: 'gen' }, each] } } as unknown as ActiveRunRow;
    const ti = { id: '7', run_id: '1', task_id: 'each[3]', state: 'none', executor: 'subprocess' } as PlannerTi;
    const d = {
      run,
      tis: [ti],
      byTask: new Map([[ti.task_id, ti]]),
      plan: { runId: '1', epoch: '1', start: false, moves: [{ tiId: '7', from: 'none', to: 'scheduled' }] },
    } as unknown as DecidedRun;
    let asked: readonly ClaimCandidate[] = [];
    const ctx = {
      dispatcher: {
        claimAhead: (c: readonly ClaimCandidate[]) => {
          asked = c;
          return { claims: new Map(), answered: () => {}, done: () => {} };
        },
      },
    } as unknown as SchedulerContext;
    claimWithTheMove(ctx, [d]);
    expect(asked).toEqual([{ tiId: '7', executor: 'subprocess', task: each }]);
  });
});
