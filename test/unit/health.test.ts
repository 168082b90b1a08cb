import { describe, expect, it } from 'vitest';
import { createHealth, healthText, type HealthOptions } from '../../src/server/observability/health.js';

function health(over: Partial<HealthOptions> & { t?: number } = {}) {
  const t = over.t ?? 1_000_000;
  return createHealth({
    loopProgress: () => ({ at: t - 500, stepSince: null }),
    loopStallMs: 60_000,
    pingDatabase: async () => {},
    pendingMigrations: async () => [],
    apiListening: () => true,
    stopping: () => false,
    databaseTimeoutMs: 100,
    now: () => t,
    ...over,
  });
}

describe('health', () => {
  it('is live while the scheduler loop turns or a step runs within the stall threshold', async () => {
    expect(await health().live()).toEqual({
      ok: true,
      checks: [{ name: 'scheduler_loop', ok: true, detail: 'last turn 0.5 s ago' }],
    });
    const t = 1_000_000;
    expect((await health({ loopProgress: () => ({ at: t - 70_000, stepSince: t - 59_000 }) }).live()).ok).toBe(true);
  });

  it('is not live when a step has run past the stall threshold, or the loop stopped turning', async () => {
    const t = 1_000_000;
    const stuck = await health({ loopProgress: () => ({ at: t - 61_000, stepSince: t - 61_000 }) }).live();
    expect(stuck).toEqual({
      ok: false,
      checks: [
        { name: 'scheduler_loop', ok: false, detail: 'a step has been running for 61.0 s (stall threshold 60.0 s)' },
      ],
    });
    const idle = await health({ loopProgress: () => ({ at: t - 75_000, stepSince: null }) }).live();
    expect(idle.checks[0]).toEqual({
      name: 'scheduler_loop',
      ok: false,
      detail: 'no turn of the loop for 75.0 s (stall threshold 60.0 s)',
    });
    expect(healthText('live', idle)).toBe(
      'not live: scheduler_loop: no turn of the loop for 75.0 s (stall threshold 60.0 s)\nFAIL scheduler_loop: no turn of the loop for 75.0 s (stall threshold 60.0 s)\n',
    );
  });

  it('is ready when listening, not stopping, the database answers and every migration is applied', async () => {
    const r = await health().ready();
    expect(r.ok).toBe(true);
    expect(r.checks.map((c) => `${c.name}:${c.ok}`)).toEqual([
      'serving:true',
      'api:true',
      'database:true',
      'migrations:true',
    ]);
    expect(healthText('ready', r).split('\n')[0]).toBe('ok');
  });

  it('names what keeps it from being ready', async () => {
    const down = await health({
      pingDatabase: () => Promise.reject(new Error('connect ECONNREFUSED 127.0.0.1:1')),
    }).ready();
    expect(down.ok).toBe(false);
    expect(healthText('ready', down).split('\n')[0]).toBe(
      'not ready: database: unreachable: connect ECONNREFUSED 127.0.0.1:1; migrations: unknown: the database is unreachable',
    );
    const slow = await health({ pingDatabase: () => new Promise(() => {}) }).ready();
    expect(slow.checks.find((c) => c.name === 'database')).toEqual({
      name: 'database',
      ok: false,
      detail: 'unreachable: the database did not answer within 100 ms',
    });
    const behind = await health({ pendingMigrations: async () => ['009_a.sql', '010_b.sql'] }).ready();
    expect(behind.checks.find((c) => c.name === 'migrations')).toEqual({
      name: 'migrations',
      ok: false,
      detail: '2 pending: 009_a.sql, 010_b.sql',
    });
    const stopping = await health({ stopping: () => true, apiListening: () => false }).ready();
    expect(healthText('ready', stopping).split('\n')[0]).toBe('not ready: serving: stopping; api: not listening');
  });
});
