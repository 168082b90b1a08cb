import type { Clients } from '../../src/cli/client.js';
import { RunState } from '../../src/gen/leoflow/v1/types_pb.js';
import { waitFor } from './leoflow-process.js';

type Run = NonNullable<Awaited<ReturnType<Clients['workflow']['getRun']>>['run']>;

/**
 * Polls GetRun (the API, where `runEnds` reads the database) until the run succeeded or failed;
 * resolves with the run, whose state the test then checks.
 */
export async function runEndsByApi(
  api: Clients,
  runId: string,
  what = 'the run to end',
  timeoutMs = 30_000,
): Promise<Run> {
  return waitFor(
    what,
    async () => {
      const run = (await api.workflow.getRun({ runId })).run!;
      return run.state === RunState.SUCCESS || run.state === RunState.FAILED ? run : null;
    },
    timeoutMs,
  );
}
