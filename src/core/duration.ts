/**
 * Durations as DAG files write them (`500ms`, `10s`, `5m`, `1h30m`, `2d`, or a plain number of
 * seconds) and as the rest of Leoflow uses them: whole milliseconds.
 */

const UNIT_MS = { d: 86_400_000, h: 3_600_000, m: 60_000, s: 1_000, ms: 1 } as const;
type Unit = keyof typeof UNIT_MS;
/** Largest first: a duration names each unit at most once, in this order. */
const UNITS: readonly Unit[] = ['d', 'h', 'm', 's', 'ms'];

const EXPECTED = 'expected a duration like "30s", "5m" or "1h30m"';
/** `ms` before `m` so the alternation never reads `500ms` as 500 minutes followed by "s". */
const PART = /(\d+)(ms|d|h|m|s)/g;
const WHOLE = /^(?:\d+(?:ms|d|h|m|s))+$/;
const DIGITS = /^\d+$/;

/**
 * Parses a duration into milliseconds.
 *
 * Accepts a string of `<integer><unit>` parts with units `d`, `h`, `m`, `s`, `ms`, largest first
 * and each at most once (`1h30m`, `2d`, `500ms`), or a non-negative integer (number or digit
 * string) meaning seconds. No fractions, signs or spaces: a DAG file's durations should read the
 * same to every tool, so anything else is rejected rather than guessed at.
 *
 * @throws Error with a message such as `expected a duration like "30s", "5m" or "1h30m", got "5 minutes"`.
 */
export function parseDuration(value: unknown): number {
  if (typeof value === 'number') {
    if (!Number.isSafeInteger(value) || value < 0) {
      throw new Error(`${EXPECTED}, got ${show(value)} (a plain number is a whole, non-negative number of seconds)`);
    }
    return checked(value * UNIT_MS.s, value);
  }
  if (typeof value !== 'string') throw new Error(`${EXPECTED}, got ${show(value)}`);
  if (DIGITS.test(value)) return checked(Number(value) * UNIT_MS.s, value);

  if (!WHOLE.test(value)) throw new Error(`${EXPECTED}, got ${show(value)}`);
  let total = 0;
  let lastUnit = -1;
  for (const [, amount, unit] of value.matchAll(PART)) {
    const unitIndex = UNITS.indexOf(unit as Unit);
    if (unitIndex <= lastUnit) {
      throw new Error(
        `${EXPECTED}, got ${show(value)} (units go from largest to smallest, each at most once: d, h, m, s, ms)`,
      );
    }
    lastUnit = unitIndex;
    total += Number(amount) * UNIT_MS[unit as Unit];
  }
  return checked(total, value);
}

/**
 * Formats milliseconds the way DAG files write them, largest unit first: 5_400_000 → `1h30m`,
 * 1_500 → `1s500ms`, 0 → `0s`. `parseDuration(formatDuration(ms)) === ms` for any safe ms ≥ 0.
 */
export function formatDuration(ms: number): string {
  if (!Number.isSafeInteger(ms) || ms < 0)
    throw new Error(`expected a non-negative whole number of milliseconds, got ${ms}`);
  if (ms === 0) return '0s';
  let rest = ms;
  let out = '';
  for (const unit of UNITS) {
    const n = Math.floor(rest / UNIT_MS[unit]);
    if (n > 0) out += `${n}${unit}`;
    rest -= n * UNIT_MS[unit];
  }
  return out;
}

function checked(ms: number, original: unknown): number {
  if (!Number.isSafeInteger(ms)) throw new Error(`duration ${show(original)} is too large`);
  return ms;
}

function show(value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(value.length > 60 ? `${value.slice(0, 60)}…` : value);
  if (value === null || typeof value !== 'object') return String(value);
  return Array.isArray(value) ? 'a list' : 'a mapping';
}
