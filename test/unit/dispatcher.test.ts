import pino from 'pino';
import { describe, expect, it } from 'vitest';
import type { Attempt } from '../../src/core/attempt.js';
import type { Claim, WorkItem } from '../../src/core/work-item.js';
import { createDispatcher, type DispatchStore } from '../../src/dispatch/dispatcher.js';
import type { Placement } from '../../src/dispatch/placement.js';
import type { Executor } from '../../src/executors/executor.js';
import { task } from '../helpers/spec-builders.js';

/**
 * The dispatcher with its store operations, executors and placement passed in as fakes: routing,
 * claims made and given back, room and backpressure, placed and parked work.
 */

const logger = pino({ level: 'silent' });
const flush = () => new Promise((r) => setImmediate(r));

function gate() {
  let open!: () => void;
  const p = new Promise<void>((r) => (open = r));
  return { p, open };
}

function item(n: number, executor = 'subprocess', claim?: Claim): WorkItem {
  return {
    tiId: String(n),
    runId: 'r',
    dagId: 'd',
    taskId: `t${n}`,
    executor,
    task: task(`t${n}`),
    conf: {},
    logicalDate: new Date(0),
    pendingReason: null,
    claim,
  };
}

const claimOf = (n: number, agentId: string | null = null): Claim => ({
  tryNumber: 1,
  maxTries: 1,
  attemptToken: `tok-${n}`,
  dispatchKey: `k${n}`,
  agentId,
});

function fakeExecutor(kind: string, hold?: Promise<void>) {
  const dispatched: Attempt[] = [];
  const live = new Set<string>();
  const executor: Executor = {
    kind,
    dispatch: async (a) => {
      dispatched.push(a);
      live.add(`${a.tiId}/${a.attemptToken}`);
      await hold;
    },
    cancel: (tiId) => [...live].some((k) => k.startsWith(`${tiId}/`)),
    holdsLive: (tiId, token) => live.has(`${tiId}/${token}`),
    activeCount: 0,
    shutdown: async () => {},
  };
  return { executor, dispatched };
}

function fakePlacement(free: string | null = 'agent-1') {
  const calls: string[] = [];
  const parked = new Set<string>();
  const placement: Placement = {
    placeAndDispatch: async (w) => (calls.push(`place ${w.tiId}`), { kind: 'waiting' }),
    placeNow: (w) => (calls.push(`placeNow ${w.tiId}`), free),
    placed: (agentId, tiId, token) => void calls.push(`placed ${tiId}@${agentId} ${token}`),
    dropped: (agentId, token) => void calls.push(`dropped ${token}@${agentId}`),
    freshen: async () => void calls.push('freshen'),
    parks: (tiId) => parked.has(tiId),
    retryParked: () => void calls.push('retryParked'),
    forgetParked: () => void calls.push('forgetParked'),
    close: async () => void calls.push('close'),
  };
  return { placement, calls, parked };
}

function setup(o: { capacity?: number; workers?: number; hold?: Promise<void>; free?: string | null } = {}) {
  const sub = fakeExecutor('subprocess', o.hold);
  const agents = fakeExecutor('agents');
  const place = fakePlacement(o.free === undefined ? 'agent-1' : o.free);
  const claims: string[] = [];
  const released: string[] = [];
  const store: DispatchStore = {
    claim: async (tiId) => (claims.push(tiId), tiId === '404' ? null : claimOf(Number(tiId))),
    release: async (c, reason) => void released.push(`${c.tiId} ${c.attemptToken} ${reason}`),
  };
  const counted = { atCapacity: 0, depth: [] as number[], dispatched: 0 };
  const dispatcher = createDispatcher({
    install: 'test-install',
    workers: o.workers ?? 1,
    capacity: o.capacity ?? 2,
    executors: new Map([
      ['subprocess', sub.executor],
      ['agents', agents.executor],
    ]),
    placements: new Map([['agents', place.placement]]),
    store,
    logger,
    metrics: {
      dispatched: () => void counted.dispatched++,
      atCapacity: () => void counted.atCapacity++,
      depth: (n) => void counted.depth.push(n),
    },
  });
  return { dispatcher, sub, agents, place, claims, released, counted };
}

describe('dispatcher', () => {
  it('claims an unclaimed item and hands its attempt to the executor of its kind', async () => {
    const t = setup();
    expect(t.dispatcher.executors).toEqual(new Set(['subprocess', 'agents']));
    expect(t.dispatcher.offer(item(1))).toBe('accepted');
    await flush();
    expect(t.claims).toEqual(['1']);
    expect(t.sub.dispatched.map((a) => [a.tiId, a.tryNumber, a.attemptToken, a.agentId])).toEqual([
      ['1', 1, 'tok-1', undefined],
    ]);
    expect(t.sub.dispatched[0]!.env.LEOFLOW_TI_ID).toBe('1');
    expect(t.counted.dispatched).toBe(1);
  });

  it('starts an item claimed with its move without a claim of its own', async () => {
    const t = setup();
    t.dispatcher.offer(item(2, 'subprocess', claimOf(2)));
    await flush();
    expect(t.claims).toEqual([]);
    expect(t.sub.dispatched.map((a) => a.attemptToken)).toEqual(['tok-2']);
  });

  it('does nothing when the claim finds the TI moved by someone else', async () => {
    const t = setup();
    t.dispatcher.offer(item(404));
    await flush();
    expect(t.claims).toEqual(['404']);
    expect(t.sub.dispatched).toEqual([]);
  });

  it('hands agent work to placement unclaimed, and delivers work placed and claimed with its move', async () => {
    const t = setup();
    t.dispatcher.offer(item(3, 'agents'));
    t.dispatcher.offer(item(4, 'agents', claimOf(4, 'agent-9')));
    await flush();
    expect(t.claims).toEqual([]);
    expect(t.place.calls).toEqual(['place 3']);
    expect(t.agents.dispatched.map((a) => [a.tiId, a.agentId])).toEqual([['4', 'agent-9']]);
  });

  it('answers duplicate for work parked in placement, and has placement try its parked work', () => {
    const t = setup();
    t.place.parked.add('5');
    expect(t.dispatcher.offer(item(5, 'agents'))).toBe('duplicate');
    expect(t.place.calls).toEqual(['retryParked']);
  });

  it('refuses when full, gives back a claim it refused, and says when it has room again', async () => {
    const g = gate();
    const t = setup({ capacity: 2, hold: g.p });
    let roomAgain = 0;
    t.dispatcher.whenRoom(() => (roomAgain++, false));
    expect(t.dispatcher.offer(item(1))).toBe('accepted'); // in flight, held by the gate
    await flush();
    expect(t.dispatcher.offer(item(2))).toBe('accepted');
    expect(t.dispatcher.offer(item(3))).toBe('accepted');
    expect(t.dispatcher.room()).toBe(0);
    expect(t.dispatcher.offer(item(4))).toBe('full');
    // A claim made with the move that the pool cannot take goes back at once, with the reason.
    expect(t.dispatcher.offer(item(6, 'subprocess', claimOf(6)))).toBe('full');
    expect(t.dispatcher.offer(item(7, 'agents', claimOf(7, 'agent-2')))).toBe('full');
    await flush();
    // The reason names the bound and its flag: a wide DAG waiting here is not an overload.
    const why = 'WAITING_FOR_DISPATCH:queue 2 of 2 in use (--dispatch-queue)';
    expect(t.dispatcher.waitReason).toBe(why);
    expect(t.released).toEqual([`6 tok-6 ${why}`, `7 tok-7 ${why}`]);
    expect(t.place.calls).toEqual(['dropped tok-7@agent-2']);
    expect(t.counted.atCapacity).toBe(3);
    expect(roomAgain).toBe(0);
    g.open();
    await flush();
    await flush();
    expect(roomAgain).toBe(1);
    expect(t.sub.dispatched.map((a) => a.tiId)).toEqual(['1', '2', '3']);
  });

  it('says again at each later drain that it has room while the scheduler still has refused work waiting', async () => {
    const g = gate();
    const t = setup({ capacity: 2, hold: g.p });
    let batches = 2; // the scheduler's refused work: it offers one batch a call
    const calls: boolean[] = [];
    t.dispatcher.whenRoom(() => {
      calls.push(t.dispatcher.drained());
      return --batches > 0;
    });
    for (const n of [1, 2, 3]) expect(t.dispatcher.offer(item(n))).toBe('accepted');
    await flush();
    expect(t.dispatcher.offer(item(4))).toBe('full');
    expect(t.dispatcher.drained()).toBe(false);
    g.open();
    for (let i = 0; i < 10; i++) await flush();
    // Each dispatch that left the pool drained to half told it, while it said work still waits.
    expect(calls).toEqual([true, true]);
    expect(t.dispatcher.offer(item(5))).toBe('accepted');
    for (let i = 0; i < 10; i++) await flush();
    expect(t.sub.dispatched.map((a) => a.tiId)).toEqual(['1', '2', '3', '5']);
    expect(calls).toHaveLength(2);
  });

  it('claims ahead all of an executor’s moves or none, holds their room until done, and places agent work in order', () => {
    const t = setup({ capacity: 4 });
    const c = (n: number, executor = 'subprocess') => ({ tiId: String(n), executor, task: task(`t${n}`) });
    // Three subprocess moves plus one already waiting fit in 4; agent work is placed while it can be.
    const ahead = t.dispatcher.claimAhead([c(1), c(2), c(3), c(9, 'nowhere')], new Map([['subprocess', 1]]));
    expect([...ahead.claims]).toEqual([
      ['1', { executor: 'subprocess', agentId: null }],
      ['2', { executor: 'subprocess', agentId: null }],
      ['3', { executor: 'subprocess', agentId: null }],
    ]);
    expect(t.dispatcher.room()).toBe(1);
    // The room is held: other work sees it taken until the claims are offered.
    expect(t.dispatcher.claimAhead([c(4), c(5)], new Map()).claims.size).toBe(0);
    ahead.done();
    ahead.done();
    expect(t.dispatcher.room()).toBe(4);

    const agents = t.dispatcher.claimAhead([c(6, 'agents'), c(7, 'agents')], new Map());
    expect([...agents.claims]).toEqual([
      ['6', { executor: 'agents', agentId: 'agent-1' }],
      ['7', { executor: 'agents', agentId: 'agent-1' }],
    ]);
    agents.answered(new Map([['6', claimOf(6, 'agent-1')]]));
    expect(t.place.calls).toEqual(['placeNow 6', 'placeNow 7', 'placed 6@agent-1 tok-6', 'placed 7@agent-1 null']);
    agents.done();
  });

  it('stops placing agent work ahead at the first that cannot be placed now', () => {
    const t = setup({ capacity: 4, free: null });
    const ahead = t.dispatcher.claimAhead(
      [
        { tiId: '1', executor: 'agents', task: task('a') },
        { tiId: '2', executor: 'agents', task: task('b') },
      ],
      new Map(),
    );
    expect(ahead.claims.size).toBe(0);
    expect(t.place.calls).toEqual(['placeNow 1']);
    expect(t.dispatcher.room()).toBe(4);
  });

  it('knows which attempts its executors hold, cancels there, and closes placement with the pool', async () => {
    const t = setup();
    t.dispatcher.offer(item(1));
    await flush();
    expect(t.dispatcher.holdsLive('1', 'tok-1')).toBe(true);
    expect(t.dispatcher.holdsLive('1', 'tok-0')).toBe(false);
    expect(t.dispatcher.cancel('1', 'cancelled')).toBe(true);
    expect(t.dispatcher.cancel('2', 'cancelled')).toBe(false);
    t.dispatcher.forgetParked();
    await t.dispatcher.freshenPlacement();
    await t.dispatcher.close();
    expect(t.place.calls).toEqual(['forgetParked', 'freshen', 'close']);
    expect(t.dispatcher.offer(item(2))).toBe('closed');
  });

  it('fails the dispatch of an executor this replica does not have, and the pool goes on', async () => {
    const t = setup();
    t.dispatcher.offer(item(1, 'kubernetes'));
    t.dispatcher.offer(item(2));
    await flush();
    await flush();
    expect(t.sub.dispatched.map((a) => a.tiId)).toEqual(['2']);
  });
});
