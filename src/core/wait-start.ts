/**
 * What a wait or an approval task holds while it waits (a row of task_waits), decided when its
 * trigger rule is met: the event and the match with the run's conf read in, its deadline, and the
 * pending reason that names them. Pure, so the planner decides it without a database.
 */
import type { OnTimeout, TaskDefinition, ApprovalRole } from './dag-spec.js';
import type { EventMatch, MatchValue } from './event-match.js';

export interface WaitStart {
  kind: 'event' | 'approval';
  /** kind 'event': the event's name and the match, `$conf.PATH` values replaced by the conf's. */
  event: string | null;
  match: EventMatch | null;
  /** kind 'approval': the weakest role that may approve. */
  role: ApprovalRole | null;
  timeoutMs: number;
  onTimeout: OnTimeout;
  /** Events received this long before the start count too (0: only later ones). */
  lookBackMs: number;
  /** The task instance's pending reason while it waits. */
  reason: string;
  /** kind 'approval': what the person is asked (recorded with the move to waiting); else null. */
  message: string | null;
}

/** A match value read from the run's conf when the wait starts: `$conf.order.id`. */
const CONF_REF = /^\$conf\.([A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*)$/;

/** The most of a match a pending reason quotes: it is a label, not a record. */
const REASON_MATCH_CHARS = 300;

function confAt(conf: unknown, path: string): MatchValue | undefined {
  let v: unknown = conf;
  for (const step of path.split('.')) {
    if (typeof v !== 'object' || v === null || Array.isArray(v) || !Object.hasOwn(v, step)) return undefined;
    v = (v as Record<string, unknown>)[step];
  }
  const scalar = v === null || ['string', 'number', 'boolean'].includes(typeof v);
  return scalar ? (v as MatchValue) : undefined;
}

/**
 * The match with each `$conf.PATH` value replaced by the run's conf at PATH. A path the conf does
 * not have (or holds an object at) matches no event: the wait can then end only at its deadline,
 * which is what a match on a value the run does not know must mean.
 */
export function resolveMatch(match: EventMatch | undefined, conf: unknown): EventMatch | null {
  if (!match) return null;
  const out: EventMatch = {};
  const one = (v: MatchValue): MatchValue | MatchValue[] => {
    const ref = typeof v === 'string' ? CONF_REF.exec(v) : null;
    if (!ref) return v;
    const found = confAt(conf, ref[1]!);
    return found === undefined ? [] : found;
  };
  for (const [path, want] of Object.entries(match)) {
    out[path] = Array.isArray(want) ? want.flatMap((w) => one(w)) : one(want);
  }
  return out;
}

/** The row a wait or an approval task starts with; null for a task that runs a command. */
export function waitStart(task: TaskDefinition, conf: unknown): WaitStart | null {
  if (task.wait) {
    const match = resolveMatch(task.wait.match, conf);
    // Keys sorted: the spec comes back from jsonb in its own key order.
    const sorted = match
      ? Object.fromEntries(Object.entries(match).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)))
      : {};
    const shown = Object.keys(sorted).length > 0 ? ` ${JSON.stringify(sorted)}` : '';
    return {
      kind: 'event',
      event: task.wait.event,
      match,
      role: null,
      timeoutMs: task.wait.timeoutMs,
      onTimeout: task.wait.onTimeout,
      lookBackMs: task.wait.lookBackMs ?? 0,
      reason: `WAITING_FOR_EVENT:${task.wait.event}${shown.slice(0, REASON_MATCH_CHARS)}`,
      message: null,
    };
  }
  if (task.approval) {
    return {
      kind: 'approval',
      event: null,
      match: null,
      role: task.approval.role,
      timeoutMs: task.approval.timeoutMs,
      onTimeout: task.approval.onTimeout,
      lookBackMs: 0,
      reason: `WAITING_FOR_APPROVAL:${task.approval.role}`,
      message: task.approval.message ?? null,
    };
  }
  return null;
}
