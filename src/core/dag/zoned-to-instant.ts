/**
 * Time zones, through `Intl` alone: whether a name is a known IANA zone, and which instant a
 * wall-clock time in a zone stands for. `start_date` without an offset is read this way.
 */

/** True when `value` names a time zone this runtime knows ("Europe/Paris", "UTC"). */
export function isTimezone(value: unknown): value is string {
  if (typeof value !== 'string' || value === '') return false;
  try {
    new Intl.DateTimeFormat(undefined, { timeZone: value });
    return true;
  } catch {
    return false; // RangeError: the only way Intl says "unknown time zone"
  }
}

/**
 * The instant at which clocks in `timezone` show `wallClock` (given as if it were UTC). Two
 * passes settle DST: a time skipped by a spring-forward gap lands just after the gap.
 */
export function zonedToInstant(wallClock: number, timezone: string): number {
  const guess = wallClock - zoneOffsetAt(wallClock, timezone);
  return wallClock - zoneOffsetAt(guess, timezone);
}

/** Building a DateTimeFormat is costly; one per zone is kept for the life of the process. */
const zoneFormats = new Map<string, Intl.DateTimeFormat>();

function zoneOffsetAt(instant: number, timezone: string): number {
  let format = zoneFormats.get(timezone);
  if (format === undefined) {
    format = new Intl.DateTimeFormat('en-US', {
      timeZone: timezone,
      hourCycle: 'h23',
      year: 'numeric',
      month: 'numeric',
      day: 'numeric',
      hour: 'numeric',
      minute: 'numeric',
      second: 'numeric',
    });
    zoneFormats.set(timezone, format);
  }
  const parts = format.formatToParts(instant);
  const get = (type: Intl.DateTimeFormatPartTypes): number => Number(parts.find((p) => p.type === type)?.value);
  const shown = Date.UTC(get('year'), get('month') - 1, get('day'), get('hour'), get('minute'), get('second'));
  return shown - Math.floor(instant / 1000) * 1000;
}
