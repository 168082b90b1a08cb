import { describe, expect, it } from 'vitest';
import {
  ACTIVE_TI_STATES,
  RUN_REOPEN_FROM,
  RUN_STATES,
  TERMINAL_RUN_STATES,
  TERMINAL_TI_STATES,
  TI_STATES,
  canTransitionRun,
  canTransitionTi,
  isRunState,
  isTerminalRun,
  isTerminalTi,
  isTiState,
  legalRunFrom,
  legalTiFrom,
  runMoveFrom,
  type RunStateName,
  type TiState,
} from '../../src/core/states.js';

/** Every state reachable from `start` by following legal moves. */
function reachable<S extends string>(start: S, states: readonly S[], can: (from: S, to: S) => boolean): Set<S> {
  const seen = new Set<S>([start]);
  const todo: S[] = [start];
  while (todo.length > 0) {
    const from = todo.pop()!;
    for (const to of states) {
      if (can(from, to) && !seen.has(to)) {
        seen.add(to);
        todo.push(to);
      }
    }
  }
  return seen;
}

const sorted = <T>(xs: readonly T[]) => [...xs].sort();

/** Every state is reachable from `start`, and from every state some terminal one is. */
function expectReachesAllThenAnEnd<S extends string>(
  start: S,
  states: readonly S[],
  terminal: readonly S[],
  can: (from: S, to: S) => boolean,
): void {
  expect(sorted([...reachable<S>(start, states, can)])).toEqual(sorted(states));
  for (const s of states) {
    const r = reachable<S>(s, states, can);
    expect(
      terminal.some((t) => r.has(t)),
      `no terminal state reachable from ${s}`,
    ).toBe(true);
  }
}

describe('task-instance state table', () => {
  it('legalTiFrom is exactly the inverse of canTransitionTi, for every pair', () => {
    for (const to of TI_STATES) {
      const from = legalTiFrom(to);
      expect(Array.isArray(from), `legalTiFrom(${to})`).toBe(true);
      expect(new Set(from).size, `duplicates in legalTiFrom(${to})`).toBe(from.length);
      for (const f of from) expect(TI_STATES).toContain(f);
      for (const f of TI_STATES) {
        expect(from.includes(f), `${f} → ${to}`).toBe(canTransitionTi(f, to));
      }
    }
  });

  it('has no transition from a state to itself', () => {
    for (const s of TI_STATES) {
      expect(canTransitionTi(s, s), s).toBe(false);
      expect(legalTiFrom(s)).not.toContain(s);
    }
  });

  it('lets a terminal state out only by clearing it (→ none)', () => {
    for (const s of TERMINAL_TI_STATES) {
      const outs = TI_STATES.filter((to) => canTransitionTi(s, to));
      expect(outs, s).toEqual(['none']);
    }
    // Conversely, none is entered only from terminal states (clear) or scheduled (un-schedule).
    expect(sorted(legalTiFrom('none'))).toEqual(sorted([...TERMINAL_TI_STATES, 'scheduled']));
  });

  it('reaches every state from none, and a terminal state from every state', () => {
    expectReachesAllThenAnEnd<TiState>('none', TI_STATES, TERMINAL_TI_STATES, canTransitionTi);
  });

  it('lets every non-terminal state be cancelled (a run cancel must be able to stop anything)', () => {
    for (const s of TI_STATES.filter((x) => !isTerminalTi(x))) {
      expect(canTransitionTi(s, 'cancelled'), s).toBe(true);
    }
    expect(sorted(legalTiFrom('cancelled'))).toEqual(sorted(TI_STATES.filter((s) => !isTerminalTi(s))));
  });

  it('allows the happy path and the retry loop', () => {
    const path: [TiState, TiState][] = [
      ['none', 'scheduled'],
      ['scheduled', 'queued'],
      ['queued', 'running'],
      ['running', 'success'],
      ['running', 'up_for_retry'],
      ['up_for_retry', 'scheduled'],
      ['running', 'failed'],
      ['queued', 'failed'],
      ['queued', 'up_for_retry'],
      ['none', 'upstream_failed'],
      ['none', 'skipped'],
    ];
    for (const [f, t] of path) expect(canTransitionTi(f, t), `${f} → ${t}`).toBe(true);
  });

  it('refuses the moves a stale writer could attempt', () => {
    const illegal: [TiState, TiState][] = [
      ['success', 'scheduled'],
      ['success', 'running'],
      ['failed', 'up_for_retry'],
      ['failed', 'scheduled'],
      ['running', 'scheduled'],
      ['running', 'queued'],
      ['none', 'running'],
      ['none', 'queued'],
      ['scheduled', 'running'],
      ['up_for_retry', 'running'],
      ['up_for_retry', 'queued'],
      ['upstream_failed', 'scheduled'],
      ['cancelled', 'running'],
      ['skipped', 'success'],
      ['waiting', 'running'],
      ['waiting', 'scheduled'],
      ['waiting', 'none'],
      ['none', 'success'],
      ['scheduled', 'waiting'],
    ];
    for (const [f, t] of illegal) {
      expect(canTransitionTi(f, t), `${f} → ${t}`).toBe(false);
      expect(legalTiFrom(t)).not.toContain(f);
    }
    expect(sorted(legalTiFrom('scheduled'))).toEqual(sorted(['none', 'queued', 'up_for_retry']));
    expect(legalTiFrom('queued')).toEqual(['scheduled']);
    expect(legalTiFrom('running')).toEqual(['queued']);
    // queued → success: the attempt ended well but its start report was lost; the result is kept.
    // waiting → success: its event or approval arrived.
    expect(sorted(legalTiFrom('success'))).toEqual(['queued', 'running', 'waiting']);
    expect(legalTiFrom('waiting')).toEqual(['none']);
    expect(legalTiFrom('up_for_retry')).toEqual(expect.arrayContaining(['queued', 'running']));
    expect(legalTiFrom('up_for_retry')).toHaveLength(2);
  });

  it('classifies states consistently', () => {
    for (const s of TI_STATES) {
      expect(isTerminalTi(s)).toBe(TERMINAL_TI_STATES.includes(s));
      expect(isTiState(s)).toBe(true);
    }
    for (const s of ACTIVE_TI_STATES) expect(isTerminalTi(s), s).toBe(false);
    expect(sorted(ACTIVE_TI_STATES)).toEqual(['queued', 'running']);
    expect(new Set(TI_STATES).size).toBe(TI_STATES.length);
    for (const s of TERMINAL_TI_STATES) expect(TI_STATES).toContain(s);
    expect(isTiState('bogus')).toBe(false);
    expect(isTiState('')).toBe(false);
    expect(isTiState('SUCCESS')).toBe(false);
    expect(isTiState('queued ')).toBe(false);
  });
});

describe('run state table', () => {
  it('legalRunFrom is exactly the inverse of canTransitionRun, for every pair', () => {
    for (const to of RUN_STATES) {
      const from = legalRunFrom(to);
      expect(Array.isArray(from), `legalRunFrom(${to})`).toBe(true);
      expect(new Set(from).size).toBe(from.length);
      for (const f of RUN_STATES) expect(from.includes(f), `${f} → ${to}`).toBe(canTransitionRun(f, to));
    }
  });

  it('has no self transition, no way into queued, and leaves a terminal state only by a re-open (→ running)', () => {
    for (const s of RUN_STATES) expect(canTransitionRun(s, s), s).toBe(false);
    expect(legalRunFrom('queued')).toEqual([]);
    for (const s of TERMINAL_RUN_STATES) {
      expect(
        RUN_STATES.filter((to) => canTransitionRun(s, to)),
        s,
      ).toEqual(['running']);
    }
    expect(sorted(RUN_REOPEN_FROM)).toEqual(sorted(TERMINAL_RUN_STATES));
  });

  it('keeps re-opens out of the ordinary guarded write', () => {
    for (const to of RUN_STATES) {
      expect(sorted(runMoveFrom(to)), to).toEqual(sorted(legalRunFrom(to).filter((s) => !isTerminalRun(s))));
    }
    expect(runMoveFrom('running')).toEqual(['queued']);
  });

  it('reaches every state from queued, and ends in a terminal state from any state', () => {
    expectReachesAllThenAnEnd<RunStateName>('queued', RUN_STATES, TERMINAL_RUN_STATES, canTransitionRun);
  });

  it('goes through running to success/failed, and cancels from queued or running', () => {
    expect(sorted(legalRunFrom('running'))).toEqual(['cancelled', 'failed', 'queued', 'success']);
    expect(legalRunFrom('success')).toEqual(['running']);
    expect(legalRunFrom('failed')).toEqual(['running']);
    expect(sorted(legalRunFrom('cancelled'))).toEqual(['queued', 'running']);
    expect(canTransitionRun('queued', 'success')).toBe(false);
    expect(canTransitionRun('running', 'queued')).toBe(false);
  });

  it('classifies states consistently', () => {
    for (const s of RUN_STATES) {
      expect(isRunState(s)).toBe(true);
      expect(isTerminalRun(s)).toBe(TERMINAL_RUN_STATES.includes(s));
    }
    expect(isRunState('none')).toBe(false);
    expect(isRunState('up_for_retry')).toBe(false);
    expect(isRunState('bogus')).toBe(false);
  });
});
