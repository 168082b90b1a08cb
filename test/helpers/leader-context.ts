import pino from 'pino';
import type { Sql } from '../../src/db/sql.js';
import type { WorkItem } from '../../src/core/work-item.js';
import type { SchedulerContext } from '../../src/scheduler/context.js';
import { testDispatcher, type DispatcherParts } from './test-dispatcher.js';
import { PlannerMemory } from '../../src/scheduler/planner-memory.js';

/**
 * A leader's scheduler context as the server builds it for planning ahead: a memory of runs and
 * of reads, a pool that takes every offer (kept in `offered`), room to claim subprocess work with
 * its move, and every phase's error kept in `errors`. `over` replaces any of it; `parts` are the
 * dispatcher's, to change between steps.
 */
export function leaderContext(sql: Sql, over: Partial<SchedulerContext> = {}): { ctx: SchedulerContext; parts: DispatcherParts; offered: WorkItem[]; errors: string[] } {
  const offered: WorkItem[] = [];
  const errors: string[] = [];
  const parts: DispatcherParts = {
    offer: (item) => (offered.push(item), 'accepted'),
    executors: new Set(['subprocess', 'agents']),
    claimRoom: (executor) => (executor === 'subprocess' ? 100 : 0),
  };
  const ctx: SchedulerContext = {
    sql,
    logger: pino({ level: 'silent' }),
    now: () => new Date(),
    dispatcher: testDispatcher(parts),
    defaultExecutor: 'subprocess',
    counters: { error: (phase, err) => errors.push(`${phase}: ${(err as Error).message}`), reaped: () => {}, agentLost: () => {} },
    maxRunsPerStep: 100,
    runOrphanThresholdMs: 300_000,
    heartbeatThresholdMs: 90_000,
    health: { healthySince: new Date(0) },
    wakeAt: () => {},
    memory: new PlannerMemory(100),
    heldBackDags: new Set(),
    ...over,
  };
  return { ctx, parts, offered, errors };
}
