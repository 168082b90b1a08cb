const DATE = /^(\d{4})-(\d{2})-(\d{2})$/;
/** An ISO 8601 time with its zone: a time without one would be read in whatever zone the shell has. */
const ZONED = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|[+-]\d{2}:\d{2})$/;

/**
 * A time given on the command line: a date (`2026-01-31`, midnight UTC) or an ISO 8601 time with
 * its zone (`2026-01-31T18:00:00Z`, `…+01:00`). Anything else, a date that does not exist
 * (`2026-02-30`) included, is an error naming the flag and the forms it takes.
 */
export function parseTime(flag: string, value: string): Date {
  const forms = 'give a date, YYYY-MM-DD (midnight UTC), or a time with its zone, such as 2026-01-31T18:00:00Z';
  const date = DATE.exec(value);
  if (date) {
    const d = new Date(`${value}T00:00:00Z`);
    if (Number.isNaN(d.getTime()) || d.toISOString().slice(0, 10) !== value)
      throw new Error(`${flag}: ${JSON.stringify(value)} is not a day of the calendar; ${forms}`);
    return d;
  }
  if (!ZONED.test(value))
    throw new Error(`${flag}: ${JSON.stringify(value)} is not a date or a time with its zone; ${forms}`);
  const d = new Date(value);
  // Date accepts 2026-02-30T00:00Z as March 2nd: the day must be the one written.
  const day = value.slice(0, 10);
  if (Number.isNaN(d.getTime()) || new Date(`${day}T00:00:00Z`).toISOString().slice(0, 10) !== day) {
    throw new Error(`${flag}: ${JSON.stringify(value)} is not a valid time; ${forms}`);
  }
  return d;
}
