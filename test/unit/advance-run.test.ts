import { describe, expect, it } from 'vitest';
import {
  advanceRun,
  evaluateTriggerRule,
  retryDelayMs,
  topologicalOrder,
  type TiStateView,
} from '../../src/core/advance-run.js';
import type { TaskDefinition, TriggerRule } from '../../src/core/dag-spec.js';
import type { TiState } from '../../src/core/states.js';
import { task as specTask } from '../helpers/spec-builders.js';

const NOW = new Date('2026-03-01T12:00:00.000Z');

/** A task of `dependsOn`, with `triggerRule`: the spec builders' task, its other fields defaulted. */
const task = (id: string, dependsOn: string[] = [], triggerRule: TriggerRule = 'all_success'): TaskDefinition =>
  specTask(id, { dependsOn, triggerRule });

function view(state: TiState, extra: Partial<TiStateView> = {}): TiStateView {
  return { state, nextTryAt: null, pendingReason: null, ...extra };
}

function tis(states: Record<string, TiState | TiStateView>): Map<string, TiStateView> {
  return new Map(Object.entries(states).map(([id, s]) => [id, typeof s === 'string' ? view(s) : s]));
}

type Verdict = 'run' | 'upstream_failed' | 'skipped' | 'wait';

/** What the planner decides for task `c` (depending on a and b under `rule`), seen through advanceRun. */
function verdictOf(rule: TriggerRule, a: TiState, b: TiState): Verdict {
  const d = advanceRun([task('a'), task('b'), task('c', ['a', 'b'], rule)], tis({ a, b, c: 'none' }), NOW);
  const hits = [
    d.schedule.includes('c') && 'run',
    d.upstreamFailed.includes('c') && 'upstream_failed',
    d.skipped.includes('c') && 'skipped',
  ].filter(Boolean);
  expect(hits.length, `c appears in more than one list: ${hits.join(',')}`).toBeLessThanOrEqual(1);
  if (hits.length === 0) {
    expect(d.reasons.get('c')).toBe('UPSTREAM_RUNNING');
    return 'wait';
  }
  return hits[0] as Verdict;
}

describe('trigger rules', () => {
  const cases: [TriggerRule, TiState, TiState, Verdict][] = [
    ['all_success', 'success', 'success', 'run'],
    ['all_success', 'success', 'running', 'wait'],
    ['all_success', 'success', 'none', 'wait'],
    ['all_success', 'success', 'up_for_retry', 'wait'],
    ['all_success', 'success', 'failed', 'upstream_failed'],
    ['all_success', 'running', 'failed', 'upstream_failed'],
    ['all_success', 'success', 'upstream_failed', 'upstream_failed'],
    ['all_success', 'success', 'cancelled', 'upstream_failed'],
    ['all_success', 'success', 'skipped', 'skipped'],
    ['all_success', 'skipped', 'failed', 'upstream_failed'],

    ['all_done', 'success', 'failed', 'run'],
    ['all_done', 'skipped', 'upstream_failed', 'run'],
    ['all_done', 'cancelled', 'success', 'run'],
    ['all_done', 'success', 'running', 'wait'],
    ['all_done', 'failed', 'up_for_retry', 'wait'],
    ['all_done', 'failed', 'queued', 'wait'],

    ['one_success', 'success', 'running', 'run'],
    ['one_success', 'none', 'success', 'run'],
    ['one_success', 'failed', 'running', 'wait'],
    ['one_success', 'failed', 'failed', 'upstream_failed'],
    ['one_success', 'skipped', 'failed', 'upstream_failed'],
    ['one_success', 'skipped', 'skipped', 'skipped'],

    ['one_failed', 'failed', 'running', 'run'],
    ['one_failed', 'upstream_failed', 'none', 'run'],
    ['one_failed', 'success', 'running', 'wait'],
    ['one_failed', 'success', 'success', 'skipped'],
    ['one_failed', 'skipped', 'success', 'skipped'],

    ['none_failed', 'success', 'skipped', 'run'],
    ['none_failed', 'skipped', 'skipped', 'run'],
    ['none_failed', 'success', 'success', 'run'],
    ['none_failed', 'success', 'running', 'wait'],
    ['none_failed', 'success', 'failed', 'upstream_failed'],
    ['none_failed', 'running', 'upstream_failed', 'upstream_failed'],
  ];
  it.each(cases)('%s with upstream (%s, %s) → %s', (rule, a, b, expected) => {
    expect(verdictOf(rule, a, b)).toBe(expected);
  });

  it('runs a task without upstream under every rule', () => {
    for (const rule of ['all_success', 'all_done', 'one_success', 'one_failed', 'none_failed'] as const) {
      expect(evaluateTriggerRule(rule, { total: 0, done: 0, success: 0, failed: 0, skipped: 0 })).toBe('run');
      const d = advanceRun([task('a', [], rule)], tis({ a: 'none' }), NOW);
      expect(d.schedule, rule).toEqual(['a']);
    }
  });
});

describe('advanceRun', () => {
  it('propagates a failure through a whole chain in one call', () => {
    const tasks = [task('a'), task('b', ['a']), task('c', ['b'])];
    const d = advanceRun(tasks, tis({ a: 'failed', b: 'none', c: 'none' }), NOW);
    expect(d.upstreamFailed).toEqual(['b', 'c']);
    expect(d.schedule).toEqual([]);
    expect(d.outcome).toBe('failed');
  });

  it('propagates in dependency order even when the spec lists tasks backwards', () => {
    const tasks = [task('c', ['b']), task('b', ['a']), task('a')];
    const d = advanceRun(tasks, tis({ a: 'failed', b: 'none', c: 'none' }), NOW);
    expect(d.upstreamFailed).toEqual(['b', 'c']);
    expect(d.outcome).toBe('failed');
  });

  it('lets a downstream rule see the moves made earlier in the same call', () => {
    // a failed ⇒ b upstream_failed ⇒ c (all_done) may run and d (one_failed) may run.
    const tasks = [task('a'), task('b', ['a']), task('c', ['b'], 'all_done'), task('d', ['b'], 'one_failed')];
    const d = advanceRun(tasks, tis({ a: 'failed', b: 'none', c: 'none', d: 'none' }), NOW);
    expect(d.upstreamFailed).toEqual(['b']);
    expect(d.schedule).toEqual(['c', 'd']);
    expect(d.outcome).toBeNull();
  });

  it('propagates skips through a chain and ends the run successfully', () => {
    const tasks = [task('a'), task('b', ['a']), task('c', ['b'])];
    const d = advanceRun(tasks, tis({ a: 'skipped', b: 'none', c: 'none' }), NOW);
    expect(d.skipped).toEqual(['b', 'c']);
    expect(d.outcome).toBe('success');
  });

  it('schedules only the roots of a fresh run and marks the others as waiting on upstream', () => {
    const tasks = [task('a'), task('b'), task('c', ['a', 'b']), task('d', ['c'])];
    const d = advanceRun(tasks, tis({ a: 'none', b: 'none', c: 'none', d: 'none' }), NOW);
    expect(d.schedule).toEqual(['a', 'b']);
    expect(d.retry).toEqual([]);
    expect(d.upstreamFailed).toEqual([]);
    expect(d.skipped).toEqual([]);
    expect(d.reasons).toEqual(
      new Map([
        ['c', 'UPSTREAM_RUNNING'],
        ['d', 'UPSTREAM_RUNNING'],
      ]),
    );
    expect(d.outcome).toBeNull();
  });

  it('emits UPSTREAM_RUNNING only when the stored reason differs', () => {
    const tasks = [task('a'), task('b', ['a']), task('c', ['a'])];
    const d = advanceRun(
      tasks,
      tis({
        a: 'running',
        b: view('none', { pendingReason: 'UPSTREAM_RUNNING' }),
        c: view('none', { pendingReason: 'RUN_QUEUED' }),
      }),
      NOW,
    );
    expect(d.reasons.has('b')).toBe(false);
    expect(d.reasons.get('c')).toBe('UPSTREAM_RUNNING');
    expect(d.reasons.size).toBe(1);
  });

  it('clears a stored reason when a task is scheduled, and leaves an already clear one alone', () => {
    const tasks = [task('a'), task('b')];
    const d = advanceRun(tasks, tis({ a: view('none', { pendingReason: 'MAX_ACTIVE_RUNS' }), b: 'none' }), NOW);
    expect(d.schedule).toEqual(['a', 'b']);
    expect(d.reasons).toEqual(new Map([['a', null]]));
  });

  it('does not touch task instances that are scheduled, queued or running', () => {
    const tasks = [task('a'), task('b'), task('c')];
    const d = advanceRun(
      tasks,
      tis({ a: view('scheduled', { pendingReason: 'DISPATCH_QUEUE_FULL' }), b: 'queued', c: 'running' }),
      NOW,
    );
    expect(d).toEqual({
      schedule: [],
      retry: [],
      wait: [],
      expand: [],
      settle: [],
      upstreamFailed: [],
      skipped: [],
      reasons: new Map(),
      outcome: null,
      nextRetryAt: null,
      heldForRoom: false,
    });
  });

  describe('retries', () => {
    const tasks = [task('a'), task('b', ['a'])];

    it('waits while the backoff has not elapsed, with the time in the reason', () => {
      const until = new Date(NOW.getTime() + 1);
      const d = advanceRun(tasks, tis({ a: view('up_for_retry', { nextTryAt: until }), b: 'none' }), NOW);
      expect(d.retry).toEqual([]);
      expect(d.reasons.get('a')).toBe('RETRY_BACKOFF_UNTIL:2026-03-01T12:00:00.001Z');
      expect(d.nextRetryAt).toEqual(until);
      expect(d.outcome).toBeNull();
    });

    it('does not repeat an unchanged backoff reason', () => {
      const until = new Date(NOW.getTime() + 30_000);
      const reason = `RETRY_BACKOFF_UNTIL:${until.toISOString()}`;
      const d = advanceRun(
        tasks,
        tis({
          a: view('up_for_retry', { nextTryAt: until, pendingReason: reason }),
          b: view('none', { pendingReason: 'UPSTREAM_RUNNING' }),
        }),
        NOW,
      );
      expect(d.reasons.size).toBe(0);
      expect(d.retry).toEqual([]);
    });

    it('retries once the backoff is due (exactly now, or past) and clears the reason', () => {
      for (const nextTryAt of [NOW, new Date(NOW.getTime() - 5000)]) {
        const d = advanceRun(
          tasks,
          tis({
            a: view('up_for_retry', { nextTryAt, pendingReason: `RETRY_BACKOFF_UNTIL:${nextTryAt.toISOString()}` }),
            b: 'none',
          }),
          NOW,
        );
        expect(d.retry).toEqual(['a']);
        expect(d.schedule).toEqual([]);
        expect(d.reasons.get('a')).toBeNull();
        // b still waits on a, which is now scheduled again (not a success).
        expect(d.reasons.get('b')).toBe('UPSTREAM_RUNNING');
        expect(d.outcome).toBeNull();
      }
    });

    it('retries at once when no next try time is recorded', () => {
      const d = advanceRun(tasks, tis({ a: 'up_for_retry', b: 'none' }), NOW);
      expect(d.retry).toEqual(['a']);
      expect(d.reasons.has('a')).toBe(false);
    });

    it('does not fail the downstream of a task that is waiting to retry', () => {
      const d = advanceRun(
        tasks,
        tis({ a: view('up_for_retry', { nextTryAt: new Date(NOW.getTime() + 1000) }), b: 'none' }),
        NOW,
      );
      expect(d.upstreamFailed).toEqual([]);
      expect(d.outcome).toBeNull();
    });
  });

  describe('run outcome', () => {
    const tasks = [task('a'), task('b'), task('c', ['a', 'b'], 'all_done')];
    const cases: [Record<string, TiState>, 'success' | 'failed' | null][] = [
      [{ a: 'success', b: 'success', c: 'success' }, 'success'],
      [{ a: 'success', b: 'skipped', c: 'skipped' }, 'success'],
      [{ a: 'skipped', b: 'skipped', c: 'skipped' }, 'success'],
      [{ a: 'failed', b: 'success', c: 'success' }, 'failed'],
      [{ a: 'upstream_failed', b: 'success', c: 'success' }, 'failed'],
      [{ a: 'cancelled', b: 'success', c: 'success' }, 'failed'],
      [{ a: 'success', b: 'success', c: 'running' }, null],
      [{ a: 'success', b: 'success', c: 'queued' }, null],
      [{ a: 'success', b: 'success', c: 'scheduled' }, null],
      [{ a: 'success', b: 'up_for_retry', c: 'none' }, null],
      // c is scheduled by this very call (all_done), so the run is not over.
      [{ a: 'failed', b: 'success', c: 'none' }, null],
    ];
    it.each(cases)('%o → %s', (states, outcome) => {
      expect(advanceRun(tasks, tis(states), NOW).outcome).toBe(outcome);
    });

    it('counts the moves of this call: an upstream_failed decided now ends the run failed', () => {
      const d = advanceRun([task('a'), task('b', ['a'])], tis({ a: 'failed', b: 'none' }), NOW);
      expect(d.outcome).toBe('failed');
    });
  });

  it('throws when a task has no task instance', () => {
    expect(() => advanceRun([task('a'), task('ghost', ['a'])], tis({ a: 'success' }), NOW)).toThrow(/ghost/);
  });

  it('throws on a cyclic spec', () => {
    expect(() => advanceRun([task('a', ['b']), task('b', ['a'])], tis({ a: 'none', b: 'none' }), NOW)).toThrow(/cycle/);
  });
});

describe('retryDelayMs', () => {
  const t = { retryDelayMs: 1000, maxRetryDelayMs: 60_000 };
  it('doubles per try from the base delay', () => {
    expect([1, 2, 3, 4, 5, 6].map((n) => retryDelayMs(t, n))).toEqual([1000, 2000, 4000, 8000, 16_000, 32_000]);
  });
  it('is capped by the maximum delay', () => {
    expect(retryDelayMs(t, 7)).toBe(60_000);
    expect(retryDelayMs(t, 31)).toBe(60_000);
    expect(retryDelayMs(t, 1_000_000)).toBe(60_000);
    expect(retryDelayMs({ retryDelayMs: 10_000, maxRetryDelayMs: 5000 }, 1)).toBe(5000);
  });
  it('treats a try number below 1 as the first try and handles a zero delay', () => {
    expect(retryDelayMs(t, 0)).toBe(1000);
    expect(retryDelayMs(t, -3)).toBe(1000);
    expect(retryDelayMs({ retryDelayMs: 0, maxRetryDelayMs: 0 }, 5)).toBe(0);
  });
  it('never returns a non-finite number', () => {
    expect(
      Number.isFinite(retryDelayMs({ retryDelayMs: 1000, maxRetryDelayMs: Number.MAX_SAFE_INTEGER }, 10_000)),
    ).toBe(true);
  });
});

describe('topologicalOrder', () => {
  const ids = (ts: TaskDefinition[]) => ts.map((t) => t.id);

  it('puts every task after its dependencies', () => {
    const tasks = [task('d', ['b', 'c']), task('c', ['a']), task('b', ['a']), task('a'), task('e', ['d', 'a'])];
    const order = ids(topologicalOrder(tasks));
    expect(order).toHaveLength(tasks.length);
    expect(new Set(order).size).toBe(tasks.length);
    for (const t of tasks)
      for (const dep of t.dependsOn)
        expect(order.indexOf(dep), `${dep} before ${t.id}`).toBeLessThan(order.indexOf(t.id));
  });

  it('keeps independent tasks in spec order', () => {
    expect(ids(topologicalOrder([task('z'), task('a'), task('m')]))).toEqual(['z', 'a', 'm']);
  });

  it('handles an empty spec', () => {
    expect(topologicalOrder([])).toEqual([]);
  });

  it('throws on a cycle, including a self-loop', () => {
    expect(() => topologicalOrder([task('a'), task('b', ['a', 'c']), task('c', ['b'])])).toThrow(/cycle/);
    expect(() => topologicalOrder([task('a', ['a'])])).toThrow(/cycle/);
  });
});
