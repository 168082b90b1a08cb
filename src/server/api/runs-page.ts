import { toBinary, type MessageInitShape } from '@bufbuild/protobuf';
import type { RunView } from '../../db/runs.js';
import { RunSchema } from '../../gen/leoflow/v1/types_pb.js';
import type { ListRunsResponseSchema } from '../../gen/leoflow/v1/workflow_pb.js';
import { runToProto } from './to-proto.js';

/** What a ListRuns page may weigh: under gRPC clients' default 4 MiB a message, with room to spare. */
export const RUNS_PAGE_BYTES = 3 * 1024 * 1024;

/**
 * The first `limit` of `runs` (read one past it, newest first), or fewer when their encoded size
 * would pass RUNS_PAGE_BYTES (each run's conf may be 64 KiB, a thousand of them 64 MiB), with the
 * token of the next page when runs remain: the id of the last run given.
 */
export function pageOfRuns(runs: RunView[], limit: number): MessageInitShape<typeof ListRunsResponseSchema> {
  const page = [];
  let bytes = 0;
  for (const r of runs.slice(0, limit)) {
    const run = runToProto(r);
    // A repeated field's entry: its bytes plus a tag and a length of a few bytes.
    const size = toBinary(RunSchema, run).length + 8;
    if (page.length > 0 && bytes + size > RUNS_PAGE_BYTES) break;
    page.push(run);
    bytes += size;
  }
  return { runs: page, nextPageToken: page.length < runs.length ? page[page.length - 1]!.runId : '' };
}
