import type { DagIssue } from '../dag-spec.js';
import { isMapping } from './field-readers.js';
import { expected } from './issue-messages.js';

/**
 * A list of mappings (`triggers:`, `notify:`, `tolerations:`), each read by `readItem`, which
 * reports its own issues and returns undefined for an item it leaves out. Every item is read, so
 * every issue is found at once; the list is undefined when any was.
 */
export function readMappingList<T>(
  value: unknown,
  path: string,
  issues: DagIssue[],
  o: { list: string; item: string; max?: { count: number; of: string } },
  readItem: (item: Record<string, unknown>, path: string) => T | undefined,
): T[] | undefined {
  if (!Array.isArray(value)) {
    issues.push(expected(o.list, value, path));
    return undefined;
  }
  if (o.max && value.length > o.max.count) {
    issues.push({ path, message: `at most ${o.max.count} ${o.max.of}, got ${value.length}` });
    return undefined;
  }
  const before = issues.length;
  const out: T[] = [];
  value.forEach((item, i) => {
    const p = `${path}[${i}]`;
    if (!isMapping(item)) {
      issues.push(expected(o.item, item, p));
      return;
    }
    const read = readItem(item, p);
    if (read !== undefined) out.push(read);
  });
  return issues.length > before ? undefined : out;
}
