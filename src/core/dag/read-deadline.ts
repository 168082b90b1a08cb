import type { DagIssue } from '../dag-spec.js';
import { readDuration } from './field-readers.js';
import { describe } from './issue-messages.js';

/** A deadline, a run's or a task's, is a duration; the longest a run could sensibly be late by. */
export const MAX_DEADLINE_MS = 30 * 86_400_000;

/** Reads `deadline:` (a DAG's or a task's): a duration more than 0 and at most 30 days. */
export function readDeadline(value: unknown, path: string, issues: DagIssue[]): number | undefined {
  const ms = readDuration(value, path, issues);
  if (ms !== undefined && (ms <= 0 || ms > MAX_DEADLINE_MS)) {
    issues.push({ path, message: `must be more than 0 and at most 30d, got ${describe(value)}` });
    return undefined;
  }
  return ms;
}
