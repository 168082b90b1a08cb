import { CronExpressionParser } from 'cron-parser';

/**
 * Cron arithmetic for scheduled runs. A run's logical date is the instant its cron expression
 * fires; the run is created once that instant has passed.
 */

/** The first fire time strictly after `after`. */
export function nextFireTime(schedule: string, timezone: string, after: Date): Date {
  const it = CronExpressionParser.parse(schedule, { currentDate: after, tz: timezone });
  return it.next().toDate();
}

/** The first fire time at or after `from`. */
export function firstFireTimeAtOrAfter(schedule: string, timezone: string, from: Date): Date {
  return nextFireTime(schedule, timezone, new Date(from.getTime() - 1));
}

/** The last fire time at or before `now`, or null if none since `notBefore`. */
export function latestFireTime(schedule: string, timezone: string, notBefore: Date, now: Date): Date | null {
  const it = CronExpressionParser.parse(schedule, { currentDate: new Date(now.getTime() + 1), tz: timezone });
  const prev = it.prev().toDate();
  return prev.getTime() >= notBefore.getTime() ? prev : null;
}
