import pino from 'pino';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { Attempt } from '../../src/core/attempt.js';
import { AgentRegistry, type AgentHandle } from '../../src/server/agents/agent-registry.js';
import type { WorkItem } from '../../src/core/work-item.js';
import { AgentPlacement } from '../../src/server/agents/placement.js';
import type { AvailableAgent, PlacementStore } from '../../src/dispatch/placement-store.js';
import { AgentsExecutor } from '../../src/server/agents/agents-executor.js';
import { placement, task } from '../helpers/spec-builders.js';

/**
 * Placement on agents against a fake store, delivering through the real agents executor: placement
 * in rounds, one claim per round, and work that waits only for a slot parked and placed, oldest
 * first, when a slot frees.
 */

const logger = pino({ level: 'silent' });

function work(n: number, over: Partial<WorkItem> = {}): WorkItem {
  return {
    tiId: String(n),
    runId: String(n),
    dagId: 'd',
    taskId: 't',
    executor: 'agents',
    task: task('t', { executor: 'agents' }),
    conf: {},
    logicalDate: new Date(0),
    pendingReason: null,
    ...over,
  };
}

/** `reasonAfterMs` is 0 unless said: why work waits is written in the round that parks it. */
function setup(agents: AvailableAgent[], over: Partial<PlacementStore> = {}, reasonAfterMs = 0) {
  const claims: string[][] = [];
  const reasons: Map<string, string>[] = [];
  const delivered: string[] = [];
  const hungry: number[] = [];
  const store: PlacementStore = {
    availableAgents: async () => agents.map((a) => ({ ...a })),
    taskLoad: async () => new Map(),
    claim: async (cs) => {
      claims.push(cs.map((c) => c.work.tiId));
      return new Map(
        cs.map((c) => [
          c.work.tiId,
          {
            tiId: c.work.tiId,
            runId: c.work.runId,
            dagId: 'd',
            taskId: 't',
            tryNumber: 1,
            maxTries: 1,
            attemptToken: `tok-${c.work.tiId}`,
            dispatchKey: 'k',
            command: ['true'],
            env: {},
            cwd: null,
            timeoutMs: null,
            agentId: c.agentId,
          } satisfies Attempt,
        ]),
      );
    },
    setPendingReasons: async (r) => void reasons.push(new Map(r)),
    ...over,
  };
  const registry = new AgentRegistry();
  for (const a of agents) {
    const handle: AgentHandle = {
      agentId: a.agentId,
      sessionId: 's',
      incarnationId: 'i',
      assign: async (at) => (delivered.push(`${at.tiId}@${a.agentId}`), 'sent'),
      cancel: () => true,
      drain: () => {},
      goAway: () => {},
      holds: () => false,
      close: () => {},
    };
    registry.register(handle);
  }
  const executor: AgentsExecutor = new AgentsExecutor({
    streams: registry,
    store: { release: async () => {}, notifyAssign: async () => {} },
    onAgentGone: () => placement.invalidate(),
  });
  const placement: AgentPlacement = new AgentPlacement({
    store,
    deliver: (a) => executor.dispatch(a),
    logger,
    cacheMs: 60_000,
    reasonAfterMs,
    onHungry: (free) => hungry.push(free),
  });
  return { placement, store, claims, reasons, delivered, hungry: () => hungry };
}

const agent = (agentId: string, slots: number, holding: string[] = []): AvailableAgent => ({
  agentId,
  labels: {},
  capabilities: [],
  slots,
  holding,
  connectedReplica: 'r',
});
/**
 * Lets the rounds in flight run to where they wait (the fake store answers in promises, no
 * timer): one turn of the event loop, with the fake clock standing still.
 */
const settle = () => vi.advanceTimersByTimeAsync(0);

describe('AgentPlacement', () => {
  // Placement reads performance.now() (when parked work's reason is due, the 100 ms between asks
  // for more work) and holds an ask back with setTimeout: both run on the fake clock.
  beforeEach(() => {
    vi.useFakeTimers();
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it('places the work waiting when a round begins with one claim, and parks what waits for a slot', async () => {
    const t = setup([agent('a', 2)]);
    const outcomes = await Promise.all([1, 2, 3, 4, 5].map((n) => t.placement.placeAndDispatch(work(n))));
    expect(outcomes.map((o) => o.kind)).toEqual(['assigned', 'assigned', 'waiting', 'waiting', 'waiting']);
    expect(t.claims).toEqual([['1', '2']]);
    expect(t.delivered).toEqual(['1@a', '2@a']);
    // The three reasons are written together.
    expect(t.reasons).toEqual([
      new Map([
        ['3', 'AGENT_SLOTS_FULL'],
        ['4', 'AGENT_SLOTS_FULL'],
        ['5', 'AGENT_SLOTS_FULL'],
      ]),
    ]);
    expect(t.placement.parkedCount).toBe(3);
    expect(t.placement.parks('3')).toBe(true);

    // A slot frees: the oldest parked work goes, without the scheduler offering it again.
    t.placement.finishing('a', 'tok-1');
    await settle();
    expect(t.claims).toEqual([['1', '2'], ['3']]);
    expect(t.placement.parks('3')).toBe(false);
    // Both free: the next two in order, in one claim; the reason is not written again.
    t.placement.finishing('a', 'tok-2');
    t.placement.finishing('a', 'tok-3');
    await settle();
    expect(t.claims.at(-1)).toEqual(['4', '5']);
    expect(t.delivered).toEqual(['1@a', '2@a', '3@a', '4@a', '5@a']);
    expect(t.reasons).toHaveLength(1);
    expect(t.placement.parkedCount).toBe(0);
  });

  it('places parked work of higher priority first when a slot frees, then the oldest', async () => {
    const t = setup([agent('a', 1)]);
    const first = t.placement.placeAndDispatch(work(1));
    const parked = [work(2), work(3, { priority: 5 }), work(4), work(5, { priority: 5 })].map((w) =>
      t.placement.placeAndDispatch(w),
    );
    await Promise.all([first, ...parked]);
    expect(t.placement.parkedCount).toBe(4);
    const placedOne = async (token: string) => {
      t.placement.finishing('a', token);
      await settle();
      return t.claims.at(-1)![0]!;
    };
    expect(await placedOne('tok-1')).toBe('3');
    expect(await placedOne('tok-3')).toBe('5');
    expect(await placedOne('tok-5')).toBe('2');
    expect(await placedOne('tok-2')).toBe('4');
  });

  it('writes why work waits alongside the claim, not ahead of it, and begins the next round once it is written', async () => {
    let written!: () => void;
    const order: string[] = [];
    const t = setup([agent('a', 1)], {
      setPendingReasons: (r) => {
        order.push(`reasons ${[...r.keys()].join(',')}`);
        return new Promise<void>((resolve) => (written = resolve));
      },
    });
    const claim = t.store.claim;
    t.store.claim = (cs) => (order.push(`claim ${cs.map((c) => c.work.tiId).join(',')}`), claim(cs));
    const outcomes = Promise.all([1, 2].map((n) => t.placement.placeAndDispatch(work(n))));
    await settle();
    // Claimed and delivered while the reasons' write is still on its way.
    expect(order).toEqual(['reasons 2', 'claim 1']);
    expect(t.delivered).toEqual(['1@a']);
    // A slot frees meanwhile: the round after waits for the write.
    t.placement.finishing('a', 'tok-1');
    await settle();
    expect(order).toEqual(['reasons 2', 'claim 1']);
    written();
    expect((await outcomes).map((o) => o.kind)).toEqual(['assigned', 'waiting']);
    await settle();
    expect(order).toEqual(['reasons 2', 'claim 1', 'claim 2']);
    expect(t.delivered).toEqual(['1@a', '2@a']);
  });

  it('places work all the same when why other work waits cannot be written, and goes on placing after', async () => {
    const t = setup([agent('a', 1)], {
      setPendingReasons: async () => Promise.reject(new Error('connection terminated')),
    });
    const outcomes = await Promise.all([1, 2, 3].map((n) => t.placement.placeAndDispatch(work(n))));
    expect(outcomes.map((o) => o.kind)).toEqual(['assigned', 'waiting', 'waiting']);
    t.placement.finishing('a', 'tok-1');
    await settle();
    t.placement.finishing('a', 'tok-2');
    await settle();
    expect(t.claims).toEqual([['1'], ['2'], ['3']]);
    expect(t.delivered).toEqual(['1@a', '2@a', '3@a']);
  });

  it('writes why parked work waits only once it has waited long enough: work placed sooner costs no write', async () => {
    const t = setup([agent('a', 1)], {}, 150);
    await Promise.all([1, 2, 3].map((n) => t.placement.placeAndDispatch(work(n))));
    expect(t.placement.parkedCount).toBe(2);
    expect(t.reasons).toEqual([]);
    // 2 is placed within 150 ms: no reason is ever written for it.
    t.placement.finishing('a', 'tok-1');
    await settle();
    expect(t.claims).toEqual([['1'], ['2']]);
    expect(t.reasons).toEqual([]);
    // 3 has waited 150 ms by the next round (the tick retries the parked work): its reason is written, once.
    await vi.advanceTimersByTimeAsync(160);
    t.placement.retryParked();
    await settle();
    expect(t.reasons).toEqual([new Map([['3', 'AGENT_SLOTS_FULL']])]);
    t.placement.retryParked();
    await settle();
    expect(t.reasons).toHaveLength(1);
    // A reason that is not about capacity (no agent has the labels) is written at once.
    await t.placement.placeAndDispatch(
      work(4, {
        task: task('t', {
          executor: 'agents',
          placement: placement({ labels: { gpu: 'yes' } }),
        }),
      }),
    );
    expect(t.reasons.at(-1)).toEqual(new Map([['4', 'NO_AGENT_WITH_LABELS:gpu=yes']]));
  });

  it('says AGENT_DRAINING when only draining agents have the labels, and never places on them', async () => {
    const gpu = placement({ labels: { gpu: 'nvidia' } });
    const drained = (id: string): AvailableAgent => ({ ...agent(id, 4), labels: { gpu: 'nvidia' }, draining: true });
    const t = setup([agent('cpu', 4), drained('g1'), drained('g2')]);
    const o = await t.placement.placeAndDispatch(work(1, { task: task('t', { executor: 'agents', placement: gpu }) }));
    expect(o).toEqual({ kind: 'waiting', reason: 'AGENT_DRAINING:2 agents with gpu=nvidia' });
    expect(t.reasons.at(-1)).toEqual(new Map([['1', 'AGENT_DRAINING:2 agents with gpu=nvidia']]));
    expect(t.placement.parkedCount).toBe(0);
    // Work any agent may take goes to the one that is not draining, though the others have more room.
    expect(await t.placement.placeAndDispatch(work(2))).toMatchObject({ kind: 'assigned', agentId: 'cpu' });
  });

  it('does not park work no agent can ever take, and asks for more work when slots are left over', async () => {
    const t = setup([agent('a', 4)]);
    const o = await t.placement.placeAndDispatch(
      work(1, {
        task: task('t', {
          executor: 'agents',
          placement: placement({ labels: { gpu: 'yes' } }),
        }),
      }),
    );
    expect(o).toEqual({ kind: 'waiting', reason: 'NO_AGENT_WITH_LABELS:gpu=yes' });
    expect(t.placement.parkedCount).toBe(0);
    await settle();
    // Once, for enough to fill the parked work to its low-water mark (64; more than the 4 free slots).
    expect(t.hungry()).toEqual([64]);
  });

  it('asks for more work while the parked work runs low, before it is gone, at most every 100 ms', async () => {
    // 20 slots: the low-water mark is 4 × 20 = 80 parked TIs.
    const t = setup([agent('a', 20)]);
    const first = await Promise.all(Array.from({ length: 30 }, (_, i) => t.placement.placeAndDispatch(work(i + 1))));
    expect(first.filter((o) => o.kind === 'assigned')).toHaveLength(20);
    expect(t.placement.parkedCount).toBe(10);
    // No slot is free, but 10 parked are below 80: the scheduler is asked for 70 more.
    expect(t.hungry()).toEqual([70]);
    // A slot frees within 100 ms: placed, but not asked again yet.
    t.placement.finishing('a', 'tok-1');
    await settle();
    expect(t.placement.parkedCount).toBe(9);
    expect(t.hungry()).toEqual([70]);
    // Once the 100 ms have passed, the ask held back is made, with nothing else happening
    // meanwhile: for 71, what the 9 parked lack.
    await vi.advanceTimersByTimeAsync(110);
    expect(t.hungry()).toEqual([70, 71]);
    t.placement.finishing('a', 'tok-2');
    await settle();
    expect(t.hungry()).toEqual([70, 71]);
    await vi.advanceTimersByTimeAsync(110);
    expect(t.hungry()).toEqual([70, 71, 72]);
  });

  it('makes an ask held back by the 100 ms limit even once every slot is free and nothing is parked', async () => {
    // The work asked for all ends within 100 ms: no round runs again, so the ask held back is
    // the only way the backlog starts before the tick.
    const t = setup([agent('a', 4)]);
    await t.placement.placeAndDispatch(work(1));
    expect(t.hungry()).toEqual([64]);
    // Within 100 ms: placed, and the ask it would make is held back.
    await t.placement.placeAndDispatch(work(2));
    expect(t.hungry()).toEqual([64]);
    t.placement.finishing('a', 'tok-1');
    t.placement.finishing('a', 'tok-2');
    await vi.advanceTimersByTimeAsync(110);
    expect(t.hungry()).toEqual([64, 64]);
    expect(t.placement.parkedCount).toBe(0);
  });

  it('does not ask for more work while enough is parked', async () => {
    const t = setup([agent('a', 1)]);
    await Promise.all(Array.from({ length: 70 }, (_, i) => t.placement.placeAndDispatch(work(i + 1))));
    expect(t.placement.parkedCount).toBe(69);
    expect(t.hungry()).toEqual([]);
  });

  it('forgets parked work when told to (leadership lost): a freed slot then places nothing', async () => {
    const t = setup([agent('a', 1)]);
    await t.placement.placeAndDispatch(work(1));
    await t.placement.placeAndDispatch(work(2));
    expect(t.placement.parkedCount).toBe(1);
    t.placement.forgetParked();
    t.placement.finishing('a', 'tok-1');
    await settle();
    expect(t.claims).toEqual([['1']]);
  });

  it('frees a slot once per attempt: a Finished repeated, or of an attempt the view does not count, frees nothing', async () => {
    const t = setup([agent('a', 1)]);
    expect((await t.placement.placeAndDispatch(work(1))).kind).toBe('assigned');
    expect((await t.placement.placeAndDispatch(work(2))).kind).toBe('waiting');
    expect((await t.placement.placeAndDispatch(work(3))).kind).toBe('waiting');
    t.placement.finishing('a', 'tok-unknown');
    await settle();
    expect(t.claims).toEqual([['1']]);
    t.placement.finishing('a', 'tok-1');
    t.placement.finishing('a', 'tok-1');
    await settle();
    // One slot, one placement: 3 still waits for 2's slot.
    expect(t.claims).toEqual([['1'], ['2']]);
    expect(t.placement.parks('3')).toBe(true);
  });

  it('leaves out of a fleet view read before an end was recorded the attempts whose Finished arrived', async () => {
    // The database still counts tok-9 (its end is not written yet), but its Finished arrived.
    const agents = [agent('a', 1, ['tok-9'])];
    const t = setup(agents);
    t.placement.finishing('a', 'tok-9');
    expect((await t.placement.placeAndDispatch(work(1))).kind).toBe('assigned');
    // Recorded now: a view read from now on no longer counts it in the database either.
    t.placement.recorded('tok-9');
    agents[0]!.holding = ['tok-1'];
    t.placement.invalidate();
    expect((await t.placement.placeAndDispatch(work(2))).kind).toBe('waiting');
    expect(t.claims).toEqual([['1']]);
  });

  it('places at once from a fresh view for a claim made with the move, and only then', async () => {
    const agents = [agent('a', 2)];
    const t = setup(agents);
    const w = (n: number) => ({ tiId: String(n), task: task('t', { executor: 'agents' }) });
    // No view read yet: it would need a read.
    expect(t.placement.placeNow(w(1))).toBeNull();
    expect((await t.placement.placeAndDispatch(work(1))).kind).toBe('assigned');
    await settle(); // the round is over
    expect(t.placement.placeNow(w(2))).toBe('a');
    // Both slots taken (1 claimed, 2 placed and its claim on the wire): nothing more, now or in a round.
    expect(t.placement.placeNow(w(3))).toBeNull();
    expect((await t.placement.placeAndDispatch(work(4))).kind).toBe('waiting');
    // Parked work waits first: nothing is placed ahead of it, even with a slot free.
    t.placement.placed('a', '2', null);
    await settle();
    expect(t.claims.at(-1)).toEqual(['4']);
    t.placement.finishing('a', 'tok-4');
    expect(t.placement.parkedCount).toBe(0);
    await settle();
    expect(t.placement.placeNow(w(5))).toBe('a');
    // A task limited per agent needs a read of its load.
    const limited = task('t', {
      executor: 'agents',
      placement: placement({ maxParallelPerAgent: 1 }),
    });
    expect(t.placement.placeNow({ tiId: '6', task: limited })).toBeNull();
  });

  it('counts a placement made at once in a view read while its claim is on the wire, and frees it with the claim', async () => {
    const agents = [agent('a', 1)];
    const t = setup(agents);
    t.placement.invalidate();
    expect((await t.placement.placeAndDispatch(work(1))).kind).toBe('assigned');
    t.placement.finishing('a', 'tok-1');
    await settle();
    expect(t.placement.placeNow({ tiId: '2', task: task('t', { executor: 'agents' }) })).toBe('a');
    // A fresh read that does not show the claim of 2 yet: its slot is still taken.
    t.placement.invalidate();
    expect((await t.placement.placeAndDispatch(work(3))).kind).toBe('waiting');
    // The claim was not made after all: the slot goes to the parked work.
    t.placement.placed('a', '2', null);
    await settle();
    expect(t.claims).toEqual([['1'], ['3']]);
  });

  it('frees the slot of a claimed attempt given back before it reached its agent', async () => {
    const t = setup([agent('a', 1)]);
    expect((await t.placement.placeAndDispatch(work(1))).kind).toBe('assigned');
    expect((await t.placement.placeAndDispatch(work(2))).kind).toBe('waiting');
    t.placement.dropped('a', 'tok-1');
    await settle();
    expect(t.claims).toEqual([['1'], ['2']]);
  });

  it('keeps no view of the fleet read before it changed (an agent drained while the read was on its way)', async () => {
    const fleet = [agent('a1', 2), agent('a2', 2)];
    const t = setup(fleet);
    const w = (n: number) => ({ tiId: String(n), task: task('t', { executor: 'agents' }) });
    let answer!: () => void;
    const read = t.store.availableAgents;
    // A read taken while a1 could still take work, answered only after a1 was drained.
    t.store.availableAgents = async () => {
      const snapshot = await read();
      await new Promise<void>((r) => (answer = r));
      return snapshot;
    };
    const freshening = t.placement.freshen();
    await settle();
    fleet.splice(0, 1); // a1 drained: the database no longer offers it
    t.placement.invalidate();
    answer();
    await freshening;
    expect(t.placement.placeNow(w(1))).toBeNull();
    // A round whose read was overtaken by the change reads again before it places.
    fleet.splice(0, fleet.length, agent('a1', 2));
    const placing = t.placement.placeAndDispatch(work(2));
    await settle(); // its read (a1 free) is on its way
    fleet.splice(0, 1); // a1 drained
    t.placement.invalidate();
    t.store.availableAgents = read;
    answer();
    expect(await placing).toMatchObject({ kind: 'waiting' });
    expect(t.delivered).toEqual([]);
  });

  it('counts a claim answered while a fleet read was on its way, which the read may not show', async () => {
    const agents = [agent('a', 1)];
    const t = setup(agents);
    expect((await t.placement.placeAndDispatch(work(1))).kind).toBe('assigned');
    t.placement.finishing('a', 'tok-1');
    t.placement.recorded('tok-1');
    await settle();
    expect(t.placement.placeNow({ tiId: '2', task: task('t', { executor: 'agents' }) })).toBe('a');
    // The view is read again (it had grown old) while 2's claim is on the wire...
    t.placement.invalidate();
    let answer!: () => void;
    const read = t.store.availableAgents;
    t.store.availableAgents = async () => {
      const snapshot = await read(); // taken before 2's claim committed
      await new Promise<void>((r) => (answer = r));
      return snapshot;
    };
    const freshening = t.placement.freshen();
    await settle();
    // ...and the claim answers before the read does.
    t.placement.placed('a', '2', 'tok-2');
    answer();
    await freshening;
    t.store.availableAgents = read;
    expect((await t.placement.placeAndDispatch(work(3))).kind).toBe('waiting');
    expect(t.claims).toEqual([['1']]);
  });
});
