import pino from 'pino';
import type { Sql } from '../../src/db/sql.js';
import type { DispatchItem, SchedulerContext } from '../../src/scheduler/context.js';
import { KnownRuns } from '../../src/scheduler/known-runs.js';
import { PrefetchedRuns } from '../../src/scheduler/prefetched-runs.js';

/**
 * A leader's scheduler context as the server builds it for planning ahead: a memory of runs and
 * of reads, a pool that takes every offer (kept in `offered`), room to claim subprocess work with
 * its move, and every phase's error kept in `errors`. `over` replaces any of it.
 */
export function leaderContext(sql: Sql, over: Partial<SchedulerContext> = {}): { ctx: SchedulerContext; offered: DispatchItem[]; errors: string[] } {
  const offered: DispatchItem[] = [];
  const errors: string[] = [];
  const ctx: SchedulerContext = {
    sql,
    logger: pino({ level: 'silent' }),
    now: () => new Date(),
    offer: (item) => (offered.push(item), 'accepted'),
    executors: new Set(['subprocess', 'agents']),
    defaultExecutor: 'subprocess',
    counters: { error: (phase, err) => errors.push(`${phase}: ${(err as Error).message}`), reaped: () => {}, agentLost: () => {} },
    maxRunsPerStep: 100,
    runOrphanThresholdMs: 300_000,
    heartbeatThresholdMs: 90_000,
    health: { healthySince: new Date(0) },
    wakeAt: () => {},
    claimRoom: (executor) => (executor === 'subprocess' ? 100 : 0),
    prefetched: new PrefetchedRuns(100),
    known: new KnownRuns(),
    heldBackDags: new Set(),
    ...over,
  };
  return { ctx, offered, errors };
}
