/**
 * The DAG's `start_date`, read by hand rather than with `Date.parse`, which accepts many
 * non-ISO forms and reads an offset-less date-time in the host's zone instead of the DAG's.
 */
import type { DagIssue } from '../dag-spec.js';
import { describe, expected } from './issue-messages.js';
import { zonedToInstant } from './zoned-to-instant.js';

const ISO_DATE_TIME =
  /^(\d{4})-(\d{2})-(\d{2})(?:[Tt ](\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?(Z|z|[+-]\d{2}(?::?\d{2})?)?)?$/;

/**
 * An ISO 8601 date or date-time, returned as a UTC ISO instant. Without an offset it is a
 * wall-clock time in `timezone`.
 */
export function readStartDate(value: unknown, path: string, timezone: string, issues: DagIssue[]): string | undefined {
  const what = 'an ISO 8601 date or date-time like "2024-01-01" or "2024-01-01T06:00:00Z"';
  const match = typeof value === 'string' ? ISO_DATE_TIME.exec(value) : null;
  if (match === null) {
    issues.push(expected(what, value, path));
    return undefined;
  }
  const [, y, mo, d, h = '0', mi = '0', s = '0', fraction = '', offset] = match;
  const fields = {
    year: Number(y),
    month: Number(mo),
    day: Number(d),
    hour: Number(h),
    minute: Number(mi),
    second: Number(s),
    ms: Number(fraction.padEnd(3, '0').slice(0, 3)),
  };
  // Day 0 of the next month is the last day of this one.
  const monthDays = new Date(Date.UTC(fields.year, fields.month, 0)).getUTCDate();
  if (
    fields.year < 1000 ||
    fields.month < 1 ||
    fields.month > 12 ||
    fields.day < 1 ||
    fields.day > monthDays ||
    fields.hour > 23 ||
    fields.minute > 59 ||
    fields.second > 59
  ) {
    issues.push({ path, message: `${describe(value)} is not a valid date or time; expected ${what}` });
    return undefined;
  }
  const wallClock = Date.UTC(
    fields.year,
    fields.month - 1,
    fields.day,
    fields.hour,
    fields.minute,
    fields.second,
    fields.ms,
  );
  // No offset in the file: the time is a wall-clock time in the DAG's time zone (UTC by default).
  const instant = offset === undefined ? zonedToInstant(wallClock, timezone) : wallClock - offsetMs(offset);
  return new Date(instant).toISOString();
}

/** `Z`, `+05:30`, `+0530`, `-08` → milliseconds east of UTC. */
function offsetMs(offset: string): number {
  if (offset === 'Z' || offset === 'z') return 0;
  const sign = offset.startsWith('-') ? -1 : 1;
  const digits = offset.slice(1).replace(':', '');
  return sign * (Number(digits.slice(0, 2)) * 60 + Number(digits.slice(2) || '0')) * 60_000;
}
