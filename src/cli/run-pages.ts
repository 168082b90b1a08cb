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
