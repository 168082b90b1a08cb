/**
 * An event's name, and whether its payload matches a trigger's `match`: a mapping of dotted paths
 * into the payload (`file.bucket`) to the value wanted there, or to a list of values any of which
 * will do. A path that is absent matches nothing. Plain equality of JSON values, so a match is
 * read at a glance and costs what the mapping is long.
 */

/** Letters, digits and `_ . : / -`, up to 200 characters, starting with a letter or digit. */
export const EVENT_NAME = /^[A-Za-z0-9][A-Za-z0-9_.:/-]{0,199}$/;
export const EVENT_NAME_RULE = '1-200 characters of letters, digits and _ . : / -, starting with a letter or digit';

/** A sender's key of an event: as a run key is spelled, so it can stand in logs and commands unquoted. */
export const EVENT_KEY = /^[A-Za-z0-9][A-Za-z0-9_.:+-]{0,199}$/;

/** A JSON scalar a match compares with (objects and arrays are not compared: name a path into them). */
export type MatchValue = string | number | boolean | null;

/** Path → the value wanted, or the values any of which will do. */
export type EventMatch = Record<string, MatchValue | MatchValue[]>;

/** The value at a dotted path of `payload`, or undefined when a step is missing. */
function at(payload: unknown, path: string): unknown {
  let v: unknown = payload;
  for (const step of path.split('.')) {
    if (typeof v !== 'object' || v === null || Array.isArray(v) || !Object.hasOwn(v, step)) return undefined;
    v = (v as Record<string, unknown>)[step];
  }
  return v;
}

export function eventMatches(match: EventMatch | undefined, payload: unknown): boolean {
  if (!match) return true;
  return Object.entries(match).every(([path, wanted]) => {
    const v = at(payload, path);
    if (v === undefined) return false;
    return Array.isArray(wanted) ? wanted.some((w) => w === v) : wanted === v;
  });
}
