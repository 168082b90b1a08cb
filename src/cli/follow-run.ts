import { Code, ConnectError } from '@connectrpc/connect';
import type { RunEvent } from '../gen/leoflow/v1/workflow_pb.js';
import type { Clients } from './client.js';

/** How many times in a row a broken watch is resumed before the error is the command's. */
const RESUMES = 20;

/**
 * A run's events from WatchRun, in seq order, each once, until the run ends (or, with follow, until
 * the caller stops). A stream cut off (a replica stopping: UNAVAILABLE; this reader too slow:
 * RESOURCE_EXHAUSTED) is resumed from the last seq received, on whichever replica answers.
 */
export async function* followRun(
  clients: Clients,
  runId: string,
  o: { afterSeq?: string; follow?: boolean; signal?: AbortSignal } = {},
): AsyncGenerator<RunEvent[]> {
  let after = o.afterSeq ?? '0';
  let failures = 0;
  for (;;) {
    try {
      for await (const res of clients.workflow.watchRun(
        { runId, afterSeq: after, follow: o.follow ?? false },
        { signal: o.signal },
      )) {
        failures = 0;
        if (res.events.length === 0) continue;
        after = res.events[res.events.length - 1]!.seq;
        yield res.events;
      }
      return;
    } catch (err) {
      const ce = ConnectError.from(err);
      if (o.signal?.aborted) return;
      if ((ce.code !== Code.Unavailable && ce.code !== Code.ResourceExhausted) || ++failures > RESUMES) throw err;
      await new Promise((r) => setTimeout(r, Math.min(2_000, 100 * failures)));
    }
  }
}
