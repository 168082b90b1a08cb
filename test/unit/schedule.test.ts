import { describe, expect, it } from 'vitest';
import { firstFireTimeAtOrAfter, latestFireTime, nextFireTime } from '../../src/core/schedule.js';

describe('schedule', () => {
  const now = new Date('2026-01-01T10:07:30Z');
  it('finds the next fire time strictly after an instant', () => {
    expect(nextFireTime('*/5 * * * *', 'UTC', now).toISOString()).toBe('2026-01-01T10:10:00.000Z');
    expect(nextFireTime('*/5 * * * *', 'UTC', new Date('2026-01-01T10:10:00Z')).toISOString()).toBe(
      '2026-01-01T10:15:00.000Z',
    );
  });
  it('finds the first fire time at or after an instant', () => {
    expect(firstFireTimeAtOrAfter('*/5 * * * *', 'UTC', new Date('2026-01-01T10:05:00Z')).toISOString()).toBe(
      '2026-01-01T10:05:00.000Z',
    );
  });
  it('finds the latest fire time at or before now, bounded below', () => {
    expect(latestFireTime('*/5 * * * *', 'UTC', new Date(0), now)?.toISOString()).toBe('2026-01-01T10:05:00.000Z');
    expect(latestFireTime('*/5 * * * *', 'UTC', new Date('2026-01-01T10:06:00Z'), now)).toBeNull();
    expect(latestFireTime('*/5 * * * *', 'UTC', new Date(0), new Date('2026-01-01T10:05:00Z'))?.toISOString()).toBe(
      '2026-01-01T10:05:00.000Z',
    );
  });
  it('reads presets in the DAG time zone', () => {
    expect(nextFireTime('@daily', 'Europe/Paris', now).toISOString()).toBe('2026-01-01T23:00:00.000Z');
  });
});
