/**
 * A task's `inputs:` mapping: environment variable name → `upstream_task.path.in.its.output`. The
 * upstream is checked against `depends_on` by the task's reader; the value is read at each attempt
 * (task-inputs.ts).
 */
import type { DagIssue } from '../dag-spec.js';
import { checkEnvName, isMapping, readString } from './field-readers.js';
import { expected, keyPath } from './issue-messages.js';

/** Leoflow's own variables are never set from an output. */
const RESERVED_PREFIX = 'LEOFLOW_';

export function readInputs(value: unknown, path: string, issues: DagIssue[]): Record<string, string> | undefined {
  if (!isMapping(value)) {
    issues.push(expected('a mapping of environment variable names to upstream_task.path', value, path));
    return undefined;
  }
  const out: [string, string][] = [];
  for (const [name, v] of Object.entries(value)) {
    const p = keyPath(path, name);
    if (!checkEnvName(name, p, issues)) continue;
    if (name.startsWith(RESERVED_PREFIX)) {
      issues.push({ path: p, message: `"${name}": names starting with ${RESERVED_PREFIX} are Leoflow's own` });
      continue;
    }
    const ref = readString(v, p, issues, { nonEmpty: true, noNul: true });
    if (ref === undefined) continue;
    if (ref.split('.').some((part) => part === '')) {
      issues.push(expected('upstream_task or upstream_task.path.to.value', ref, p));
      continue;
    }
    out.push([name, ref]);
  }
  return Object.fromEntries(out);
}
