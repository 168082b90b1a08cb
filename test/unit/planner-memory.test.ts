import { describe, expect, it } from 'vitest';
import type { ActiveRunRow } from '../../src/db/runs.js';
import type { TiRow } from '../../src/db/tis.js';
import { PlannerMemory, type RunRead } from '../../src/scheduler/planner-memory.js';

/** A run of two task instances, as the planner holds it (only the fields the memory looks at). */
const runRead = (runId: string): RunRead => ({
  run: { id: runId, state: 'running' } as ActiveRunRow,
  tis: ['a', 'b'].map(
    (t) => ({ id: `${runId}-${t}`, run_id: runId, task_id: t, state: 'running', pending_reason: null }) as TiRow,
  ),
});

describe('PlannerMemory', () => {
  it('drops everything held of a run that changed: its read, what was known, its currency', () => {
    const m = new PlannerMemory(100);
    m.keepRead(runRead('1'));
    m.remember(runRead('1'));
    const since = m.noteEndsInFlight(['1-a']);
    m.changed(['1']);
    expect(m.takeReads(['1']).size).toBe(0);
    expect(m.ofTi('1-a')).toBeUndefined();
    // Known again from a read, but a plan sent before the change does not make it current.
    m.remember(runRead('1'));
    m.markCurrent('1', since);
    expect(m.takeCurrentReads(['1']).size).toBe(0);
  });

  it('keeps the reads of a run whose known state is forgotten, and what is known of runs whose reads are dropped', () => {
    const m = new PlannerMemory(100);
    m.keepRead(runRead('1'));
    m.remember(runRead('1'));
    m.forget(['1']);
    expect(m.ofTi('1-a')).toBeUndefined();
    expect([...m.takeReads(['1']).keys()]).toEqual(['1']);

    m.keepRead(runRead('2'));
    m.remember(runRead('2'));
    m.dropReads();
    expect(m.readsKept).toBe(0);
    expect(m.ofTi('2-b')?.run.id).toBe('2');
  });

  it('makes a known run current for one step when nothing reached it after the plan was decided', () => {
    const m = new PlannerMemory(100);
    m.remember(runRead('1'));
    m.remember(runRead('2'));
    const since = m.noteEndsInFlight(['1-a', '2-a']);
    m.noteEndsInFlight(['2-b']); // another end of run 2 on its way
    m.markCurrent('1', since);
    m.markCurrent('2', since);
    expect([...m.takeCurrentReads(['1', '2']).keys()]).toEqual(['1']);
    expect(m.takeCurrentReads(['1']).size).toBe(0);
  });

  it('forgets everything on clear, runs ended ahead included', () => {
    const m = new PlannerMemory(100);
    m.keepRead(runRead('1'));
    m.remember(runRead('2'));
    m.recordEndedAhead('3', 'dag');
    m.clear();
    expect([m.readsKept, m.ofTi('2-a'), m.takeEndedAhead(['3']).size]).toEqual([0, undefined, 0]);
  });
});
