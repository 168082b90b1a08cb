/**
 * A DAG's `triggers:`: the events that start a run of it, each with an optional `match` on the
 * event's payload (core/event-match.ts). A matching event's payload becomes the run's conf.
 */
import type { DagIssue, TriggerSpec } from '../dag-spec.js';
import { EVENT_NAME, EVENT_NAME_RULE, type EventMatch, type MatchValue } from '../event-match.js';
import { isMapping } from './field-readers.js';
import { describe, expected, keyPath, missing, unknownKey } from './issue-messages.js';
import { readMappingList } from './read-mapping-list.js';

const TRIGGER_KEYS = ['event', 'match'] as const;
/** Enough for any real fan of triggers; a list past it is a generated file gone wrong. */
export const MAX_TRIGGERS = 100;
const PATH = /^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$/;

const isScalar = (v: unknown): v is MatchValue =>
  v === null || typeof v === 'string' || typeof v === 'boolean' || (typeof v === 'number' && Number.isFinite(v));

export function readTriggers(value: unknown, path: string, issues: DagIssue[]): TriggerSpec[] | undefined {
  const o = {
    list: 'a list of triggers, each { event: NAME, match: { path: value } }',
    item: 'a trigger mapping (event, match)',
    max: { count: MAX_TRIGGERS, of: 'triggers' },
  };
  return readMappingList(value, path, issues, o, (item, p) => {
    const t: Partial<TriggerSpec> = {};
    for (const [key, v] of Object.entries(item)) {
      const kp = keyPath(p, key);
      if (key === 'event') {
        if (typeof v !== 'string' || !EVENT_NAME.test(v))
          issues.push({ path: kp, message: `an event name is ${EVENT_NAME_RULE}, got ${describe(v)}` });
        else t.event = v;
      } else if (key === 'match') {
        const m = readMatch(v, kp, issues);
        if (m) t.match = m;
      } else issues.push(unknownKey(key, kp, TRIGGER_KEYS));
    }
    if (!Object.hasOwn(item, 'event')) issues.push(missing('event', keyPath(p, 'event')));
    return t.event !== undefined ? (t as TriggerSpec) : undefined;
  });
}

/** A `match:` mapping of payload paths to a value, or to a list of values any of which will do. */
export function readMatch(v: unknown, path: string, issues: DagIssue[]): EventMatch | undefined {
  if (!isMapping(v)) {
    issues.push(expected('a mapping of payload paths (a.b.c) to a value or a list of values', v, path));
    return undefined;
  }
  const out: EventMatch = {};
  for (const [k, want] of Object.entries(v)) {
    const kp = keyPath(path, k);
    if (!PATH.test(k)) {
      issues.push({ path: kp, message: `a payload path is names joined by dots (file.bucket), got ${describe(k)}` });
    } else if (isScalar(want) || (Array.isArray(want) && want.length > 0 && want.every(isScalar))) {
      out[k] = want;
    } else {
      issues.push({
        path: kp,
        message: `expected a string, number, boolean or null, or a non-empty list of them, got ${describe(want)}`,
      });
    }
  }
  return out;
}
