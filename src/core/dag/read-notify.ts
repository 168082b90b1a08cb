/**
 * A DAG's `notify:`: whom to tell when one of its runs ends, each rule `{ on: [kinds], to: receiver }`,
 * a receiver the server's `--notify` file defines. A DAG with its own rules does not get the
 * server's defaults; `notify: []` opts out of them.
 */
import type { DagIssue } from '../dag-spec.js';
import { NOTIFY_KINDS, RECEIVER_NAME, RECEIVER_NAME_RULE, type NotifyKind, type NotifyRule } from '../notify-rule.js';
import { readEnum } from './field-readers.js';
import { describe, expected, keyPath, missing, unknownKey } from './issue-messages.js';
import { readMappingList } from './read-mapping-list.js';

const RULE_KEYS = ['on', 'to'] as const;
/** More rules than receivers anyone runs: a longer list is a generated file gone wrong. */
export const MAX_NOTIFY_RULES = 20;

export function readNotify(value: unknown, path: string, issues: DagIssue[]): NotifyRule[] | undefined {
  const list = 'a list of rules, each { on: [failed, success, deadline_missed, approval_requested], to: RECEIVER }';
  const o = { list, item: 'a rule mapping (on, to)', max: { count: MAX_NOTIFY_RULES, of: 'notify rules' } };
  return readMappingList(value, path, issues, o, (item, p) => {
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
    return rule.on && rule.to ? { on: rule.on, to: rule.to } : undefined;
  });
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
