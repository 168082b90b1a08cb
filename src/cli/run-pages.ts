import { parseMappedTaskId } from '../core/map-spec.js';
import type { Run, TaskInstance } from '../gen/leoflow/v1/types_pb.js';
import type { Clients } from './client.js';

/**
 * A run and its task instances, read a GetRun page at a time (each under gRPC's 4 MiB). `all`:
 * every task instance, 100,000 mapped ones too; else the pages until the run's own task instances
 * are all read (they come first), where a mapped task's own instance counts its mapped instances
 * (`mapCount`, `mapStateCounts`): what a summary needs, in one page for most runs.
 */
export async function readRunPages(
  clients: Clients,
  runId: string,
  o: { all: boolean },
): Promise<{ run: Run; tis: TaskInstance[] }> {
  const tis: TaskInstance[] = [];
  let pageToken = '';
  for (;;) {
    const res = await clients.workflow.getRun({ runId, pageToken });
    tis.push(...res.taskInstances);
    pageToken = res.nextPageToken;
    const reachedMapped = res.taskInstances.some((t) => parseMappedTaskId(t.taskId) !== null);
    if (pageToken === '' || (!o.all && reachedMapped)) return { run: res.run!, tis };
  }
}

/**
 * A run's task instances counted by state, as if every page were read: a mapped task's instances
 * by its own instance's counts (`mapStateCounts`), those read skipped; from a server that does not
 * count them (`mapCount` 0), those read.
 */
export function countByState(tis: readonly TaskInstance[], stateOf: (t: TaskInstance) => string): Map<string, number> {
  const counted = new Set(tis.filter((t) => t.mapCount > 0).map((t) => t.taskId));
  const counts = new Map<string, number>();
  const add = (s: string, n: number) => counts.set(s, (counts.get(s) ?? 0) + n);
  for (const t of tis) {
    const mapped = parseMappedTaskId(t.taskId);
    if (mapped && counted.has(mapped.task)) continue;
    add(stateOf(t), 1);
    if (t.mapCount > 0) for (const [s, n] of Object.entries(t.mapStateCounts)) add(s, n);
  }
  return counts;
}
