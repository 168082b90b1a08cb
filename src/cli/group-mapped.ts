import { parseMappedTaskId } from '../core/map-spec.js';

/** A row of `run show`: one task instance, or the mapped instances of one task as a group. */
export type ShownTi<T> = { kind: 'one'; ti: T } | { kind: 'mapped'; task: string; count: number; states: string };

/**
 * Groups a run's mapped instances (`task[0]` … `task[999]`) into one row per task, in the place of
 * the first, with their counts by state (`998 success, 2 failed`), so a run of a 100,000-item map
 * reads as a few lines. Other task instances are kept as they are, in order.
 */
export function groupMapped<T extends { taskId: string }>(tis: readonly T[], stateOf: (ti: T) => string): ShownTi<T>[] {
  const out: ShownTi<T>[] = [];
  const groups = new Map<string, { row: ShownTi<T> & { kind: 'mapped' }; counts: Map<string, number> }>();
  for (const ti of tis) {
    const m = parseMappedTaskId(ti.taskId);
    if (!m) {
      out.push({ kind: 'one', ti });
      continue;
    }
    let g = groups.get(m.task);
    if (!g) {
      g = { row: { kind: 'mapped', task: m.task, count: 0, states: '' }, counts: new Map() };
      groups.set(m.task, g);
      out.push(g.row);
    }
    g.row.count++;
    const s = stateOf(ti);
    g.counts.set(s, (g.counts.get(s) ?? 0) + 1);
  }
  for (const g of groups.values()) {
    g.row.states = [...g.counts]
      .sort((a, b) => b[1] - a[1])
      .map(([s, n]) => `${n} ${s}`)
      .join(', ');
  }
  return out;
}

/** The name of a group's row: `task[0..999]`. */
export function mappedRange(task: string, count: number): string {
  return `${task}[0..${count - 1}]`;
}

/**
 * A group's row name and counts: from the mapped task's own instance when it counts them all
 * (GetRun's `mapCount` and `mapStateCounts`, whatever page the instances are on), else from the
 * instances read (a server that does not count them).
 */
export function mappedSummary(
  g: { task: string; count: number; states: string },
  parent: { mapCount: number; mapStateCounts: Record<string, number> } | undefined,
): { name: string; states: string } {
  if (!parent || parent.mapCount === 0) return { name: mappedRange(g.task, g.count), states: g.states };
  const states = Object.entries(parent.mapStateCounts)
    .sort((a, b) => b[1] - a[1])
    .map(([s, n]) => `${n} ${s}`)
    .join(', ');
  return { name: mappedRange(g.task, parent.mapCount), states };
}
