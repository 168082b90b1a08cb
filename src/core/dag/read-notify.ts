/**
 * A DAG's `notify:`: whom to tell when one of its runs ends, each rule `{ on: [kinds], to: receiver }`,
 * a receiver the server's `--notify` file defines. A DAG with its own rules does not get the
 * server's defaults; `notify: []` opts out of them.
 */
import type { DagIssue } from '../dag-spec.js';
import { NOTIFY_KINDS, RECEIVER_NAME, RECEIVER_NAME_RULE, type NotifyKind, type NotifyRule } from '../notify-rule.js';
import { isMapping, readEnum } from './field-readers.js';
import { describe, expected, keyPath, missing, unknownKey } from './issue-messages.js';

const RULE_KEYS = ['on', 'to'] as const;
/** More rules than receivers anyone runs: a longer list is a generated file gone wrong. */
export const MAX_NOTIFY_RULES = 20;

export function readNotify(value: unknown, path: string, issues: DagIssue[]): NotifyRule[] | undefined {
  if (!Array.isArray(value)) {
    const what = 'a list of rules, each { on: [failed, success, deadline_missed, approval_requested], to: RECEIVER }';
    issues.push(expected(what, value, path));
    return undefined;
  }
  if (value.length > MAX_NOTIFY_RULES) {
    issues.push({ path, message: `at most ${MAX_NOTIFY_RULES} notify rules, got ${value.length}` });
    return undefined;
  }
  const before = issues.length;
  const out: NotifyRule[] = [];
  value.forEach((item, i) => {
    const p = `${path}[${i}]`;
    if (!isMapping(item)) {
      issues.push(expected('a rule mapping (on, to)', item, p));
      return;
    }
    const rule: Partial<NotifyRule> = {};
    for (const [key, v] of Object.entries(item)) {
      const kp = keyPath(p, key);
      if (key === 'on') rule.on = readKinds(v, kp, issues);
      else if (key === 'to') {
        if (typeof v !== 'string' || !RECEIVER_NAME.test(v))
          issues.push({ path: kp, message: `a receiver name is ${RECEIVER_NAME_RULE}, got ${describe(v)}` });
        else rule.to = v;
      } else issues.push(unknownKey(key, kp, RULE_KEYS));
    }
    for (const key of RULE_KEYS) if (!Object.hasOwn(item, key)) issues.push(missing(key, keyPath(p, key)));
    if (rule.on && rule.to) out.push({ on: rule.on, to: rule.to });
  });
  return issues.length > before ? undefined : out;
}

function readKinds(v: unknown, path: string, issues: DagIssue[]): NotifyKind[] | undefined {
  const list = typeof v === 'string' ? [v] : v;
  if (!Array.isArray(list) || list.length === 0) {
    issues.push(expected(`a non-empty list of ${NOTIFY_KINDS.join(', ')}`, v, path));
    return undefined;
  }
  const before = issues.length;
  const kinds = new Set<NotifyKind>();
  list.forEach((k, i) => {
    const kind = readEnum(k, `${path}[${i}]`, NOTIFY_KINDS, issues);
    if (kind) kinds.add(kind);
  });
  return issues.length > before ? undefined : [...kinds];
}
