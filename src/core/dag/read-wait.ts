/**
 * A task's `wait:` and `approval:` blocks: tasks that end on an event or on a person's word
 * instead of running a command, and hold no slot, process or agent while they wait.
 */
import {
  APPROVAL_ROLES,
  ON_TIMEOUT,
  type ApprovalSpec,
  type DagIssue,
  type OnTimeout,
  type WaitSpec,
} from '../dag-spec.js';
import { formatDuration } from '../duration.js';
import { EVENT_NAME, EVENT_NAME_RULE } from '../event-match.js';
import { isMapping, readDuration, readEnum, readString } from './field-readers.js';
import { describe, expected, keyPath, missing, unknownKey } from './issue-messages.js';
import { readMatch } from './read-triggers.js';

const WAIT_KEYS = ['event', 'match', 'timeout', 'look_back', 'on_timeout'] as const;
const APPROVAL_KEYS = ['role', 'timeout', 'message', 'on_timeout'] as const;

/** The longest a wait or an approval may wait: a month, past which a run is better re-triggered. */
export const MAX_WAIT_TIMEOUT_MS = 30 * 86_400_000;
/** How far back a wait may look for an event received before it started. */
export const MAX_LOOK_BACK_MS = 7 * 86_400_000;
/** An approval's message is shown to the person asked; a page of text at most. */
export const MAX_APPROVAL_MESSAGE_CHARS = 2000;

/** The keys of a task that runs a command, which a wait or an approval must not have. */
export const COMMAND_ONLY_KEYS = [
  'command',
  'retries',
  'retry_delay',
  'max_retry_delay',
  'timeout',
  'env',
  'cwd',
  'executor',
  'image',
  'placement',
  'kubernetes',
  'output',
  'inputs',
  'cache',
] as const;

function readBoundedDuration(
  value: unknown,
  path: string,
  max: number,
  issues: DagIssue[],
  allowZero: boolean,
): number | undefined {
  const ms = readDuration(value, path, issues);
  if (ms === undefined) return undefined;
  if (ms === 0 && !allowZero) {
    issues.push({ path, message: `must be greater than 0, got ${describe(value)}` });
    return undefined;
  }
  if (ms > max) {
    issues.push({ path, message: `must be at most ${formatDuration(max)}, got ${describe(value)}` });
    return undefined;
  }
  return ms;
}

/** `wait: { event, match?, timeout, look_back?, on_timeout? }`. */
export function readWait(value: unknown, path: string, issues: DagIssue[]): WaitSpec | undefined {
  if (!isMapping(value)) {
    issues.push(expected('a wait mapping { event: NAME, match: {...}, timeout: DURATION }', value, path));
    return undefined;
  }
  const before = issues.length;
  const w: Partial<WaitSpec> = {};
  for (const [key, v] of Object.entries(value)) {
    const p = keyPath(path, key);
    switch (key) {
      case 'event':
        if (typeof v !== 'string' || !EVENT_NAME.test(v))
          issues.push({ path: p, message: `an event name is ${EVENT_NAME_RULE}, got ${describe(v)}` });
        else w.event = v;
        break;
      case 'match': {
        const m = readMatch(v, p, issues);
        if (m) w.match = m;
        break;
      }
      case 'timeout':
        w.timeoutMs = readBoundedDuration(v, p, MAX_WAIT_TIMEOUT_MS, issues, false);
        break;
      case 'look_back':
        w.lookBackMs = readBoundedDuration(v, p, MAX_LOOK_BACK_MS, issues, true);
        break;
      case 'on_timeout':
        w.onTimeout = readEnum<OnTimeout>(v, p, ON_TIMEOUT, issues);
        break;
      default:
        issues.push(unknownKey(key, p, WAIT_KEYS));
    }
  }
  if (!Object.hasOwn(value, 'event')) issues.push(missing('event', keyPath(path, 'event')));
  if (!Object.hasOwn(value, 'timeout')) issues.push(missing('timeout', keyPath(path, 'timeout')));
  if (issues.length > before) return undefined;
  return {
    event: w.event!,
    ...(w.match !== undefined ? { match: w.match } : {}),
    timeoutMs: w.timeoutMs!,
    ...(w.lookBackMs ? { lookBackMs: w.lookBackMs } : {}),
    onTimeout: w.onTimeout ?? 'failed',
  };
}

/** `approval: { role?, timeout, message?, on_timeout? }`. */
export function readApproval(value: unknown, path: string, issues: DagIssue[]): ApprovalSpec | undefined {
  if (!isMapping(value)) {
    issues.push(expected('an approval mapping { role: operator, timeout: DURATION, message: TEXT }', value, path));
    return undefined;
  }
  const before = issues.length;
  const a: Partial<ApprovalSpec> = {};
  for (const [key, v] of Object.entries(value)) {
    const p = keyPath(path, key);
    switch (key) {
      case 'role':
        a.role = readEnum(v, p, APPROVAL_ROLES, issues);
        break;
      case 'timeout':
        a.timeoutMs = readBoundedDuration(v, p, MAX_WAIT_TIMEOUT_MS, issues, false);
        break;
      case 'message': {
        const text = readString(v, p, issues, { nonEmpty: true, noNul: true });
        if (text !== undefined && text.length > MAX_APPROVAL_MESSAGE_CHARS)
          issues.push({
            path: p,
            message: `must be at most ${MAX_APPROVAL_MESSAGE_CHARS} characters, got ${text.length}`,
          });
        else if (text !== undefined) a.message = text;
        break;
      }
      case 'on_timeout':
        a.onTimeout = readEnum<OnTimeout>(v, p, ON_TIMEOUT, issues);
        break;
      default:
        issues.push(unknownKey(key, p, APPROVAL_KEYS));
    }
  }
  if (!Object.hasOwn(value, 'timeout')) issues.push(missing('timeout', keyPath(path, 'timeout')));
  if (issues.length > before) return undefined;
  return {
    role: a.role ?? 'operator',
    timeoutMs: a.timeoutMs!,
    ...(a.message !== undefined ? { message: a.message } : {}),
    onTimeout: a.onTimeout ?? 'failed',
  };
}
